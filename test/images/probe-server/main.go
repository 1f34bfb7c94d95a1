// Command probe-server is a test image for container probes. It serves HTTP on :8080, where
// /healthz answers 200 while the file /tmp/healthy exists and 503 otherwise, and /ready
// does the same for /tmp/ready; and it accepts TCP connections on :9000 (and closes them).
// Tests flip the answers by creating or removing the files with exec (the image has
// busybox). Both files are absent at start. It exits 0 on SIGTERM or SIGINT.
//
// `probe-server whoami SERVER` is instead a client: with the pod's service-account token
// and CA (the projected kube-api-access volume), it asks the API server at SERVER who it
// is (a SelfSubjectReview, as `kubectl auth whoami`) and prints the user name.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "whoami" {
		if err := whoami(os.Args[2]); err != nil {
			log.Fatal(err)
		}
		return
	}
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

// serviceAccountDir is where the kube-api-access volume is mounted.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

// whoami posts a SelfSubjectReview to server with the pod's token and prints the user.
func whoami(server string) error {
	token, err := os.ReadFile(serviceAccountDir + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(serviceAccountDir + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("ca.crt holds no certificate")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequest(http.MethodPost, server+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, answer)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(answer, &review); err != nil {
		return err
	}
	fmt.Println(review.Status.UserInfo.Username)
	return nil
}
