// Command probe-server is a test image for container probes. It serves HTTP on :8080, where
// /healthz answers 200 while the file /tmp/healthy exists and 503 otherwise, and /ready
// does the same for /tmp/ready; and it accepts TCP connections on :9000 (and closes them).
// Tests flip the answers by creating or removing the files with exec (the image has
// busybox). Both files are absent at start. It exits 0 on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tcp, err := net.Listen("tcp", ":9000")
	if err != nil {
		log.Fatal(err)
	}
	go acceptAndClose(tcp)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", fileCheck("/tmp/healthy"))
	mux.HandleFunc("/ready", fileCheck("/tmp/ready"))
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Print("probe-server: HTTP on :8080 (/healthz, /ready), TCP on :9000")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// fileCheck answers 200 while path exists, 503 otherwise.
func fileCheck(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(path); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s is missing\n", path)
			return
		}
		fmt.Fprintf(w, "ok: %s exists\n", path)
	}
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
