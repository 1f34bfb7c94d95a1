package probe

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	if got, out, err := TCP(context.Background(), "127.0.0.1", port, time.Second); got != Success || err != nil {
		t.Errorf("open port: TCP = %q, %q, %v; want success", got, out, err)
	}
	ln.Close()
	got, out, err := TCP(context.Background(), "127.0.0.1", port, time.Second)
	if got != Failure || err != nil || out == "" {
		t.Errorf("closed port: TCP = %q, %q, %v; want failure with a message", got, out, err)
	}
}

func TestTCPHostName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// localhost may resolve to ::1 first; the dial must go on to 127.0.0.1.
	if got, out, err := TCP(context.Background(), "localhost", ln.Addr().(*net.TCPAddr).Port, time.Second); got != Success || err != nil {
		t.Errorf("TCP(localhost) = %q, %q, %v; want success", got, out, err)
	}
}
