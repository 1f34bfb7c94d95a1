package cri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		endpoint string
		want     string // "" means an error is expected
	}{
		{"unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"},
		{"unix:///var/run/crio/crio.sock", "/var/run/crio/crio.sock"},
		{"/run/containerd/containerd.sock", "/run/containerd/containerd.sock"},
		{"/run//containerd/../containerd/containerd.sock", "/run/containerd/containerd.sock"},
		{"", ""},
		{"tcp://127.0.0.1:2375", ""},
		{"http://localhost/run/containerd.sock", ""},
		{"npipe:////./pipe/containerd", ""},
		{"unix://", ""},
		{"unix://run/containerd.sock", ""}, // "run" would be a host
		{"unix:relative.sock", ""},
		{"run/containerd.sock", ""},
		{"containerd.sock", ""},
	}
	for _, tc := range tests {
		t.Run(tc.endpoint, func(t *testing.T) {
			got, err := ParseEndpoint(tc.endpoint)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseEndpoint(%q) = %q, want an error", tc.endpoint, got)
				}
				if !errors.Is(err, ErrInvalidEndpoint) {
					t.Errorf("error %v does not wrap ErrInvalidEndpoint", err)
				}
				if tc.endpoint != "" && !strings.Contains(err.Error(), tc.endpoint) {
					t.Errorf("error %q does not name the endpoint", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseEndpoint(%q) = %q, %v; want %q", tc.endpoint, got, err, tc.want)
			}
		})
	}
}

func TestImageEndpointOrDefault(t *testing.T) {
	if got := ImageEndpointOrDefault("", "unix:///a.sock"); got != "unix:///a.sock" {
		t.Errorf("empty image endpoint: got %q", got)
	}
	if got := ImageEndpointOrDefault("unix:///b.sock", "unix:///a.sock"); got != "unix:///b.sock" {
		t.Errorf("set image endpoint: got %q", got)
	}
}

func TestNewRemoteRuntimeServiceConnects(t *testing.T) {
	rs, _ := newTestClients(t, newFakeCRI())
	v, err := rs.Version(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "fake" {
		t.Errorf("RuntimeName = %q", v.RuntimeName)
	}
}

func TestNewRemoteRuntimeServiceAcceptsBarePath(t *testing.T) {
	endpoint := startFakeCRI(t, newFakeCRI())
	rs, err := NewRemoteRuntimeService(context.Background(), strings.TrimPrefix(endpoint, "unix://"), time.Second, testRequestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	_ = rs.Close(context.Background())
}

func TestNewRemoteRuntimeServiceRejectsRuntimeWithoutCRIv1(t *testing.T) {
	f := newFakeCRI()
	f.unset("Version") // the server now answers Unimplemented, as a v1alpha2-only runtime does
	endpoint := startFakeCRI(t, f)
	_, err := NewRemoteRuntimeService(context.Background(), endpoint, 5*time.Second, testRequestTimeout)
	if err == nil {
		t.Fatal("want an error")
	}
	want := `runtime endpoint "` + endpoint + `" does not implement the CRI v1 runtime API`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("status code = %v, want Unimplemented (wrapped)", status.Code(err))
	}
}

func TestNewRemoteImageServiceRejectsRuntimeWithoutCRIv1(t *testing.T) {
	f := newFakeCRI()
	f.unset("ImageFsInfo")
	endpoint := startFakeCRI(t, f)
	_, err := NewRemoteImageService(context.Background(), endpoint, 5*time.Second, testRequestTimeout)
	want := `image endpoint "` + endpoint + `" does not implement the CRI v1 image API`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v does not contain %q", err, want)
	}
}

func TestNewRemoteRuntimeServiceFailsFastWithoutSocket(t *testing.T) {
	endpoint := "unix://" + filepath.Join(t.TempDir(), "missing.sock")
	start := time.Now()
	_, err := NewRemoteRuntimeService(context.Background(), endpoint, time.Minute, testRequestTimeout)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("took %v to fail, want < 2s", elapsed)
	}
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{endpoint, "no such file or directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestNewRemoteImageServiceFailsFastWithoutSocket(t *testing.T) {
	endpoint := filepath.Join(t.TempDir(), "missing.sock")
	start := time.Now()
	_, err := NewRemoteImageService(context.Background(), endpoint, time.Minute, testRequestTimeout)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("took %v to fail, want < 2s", elapsed)
	}
	if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("error %v should name %q and the missing file", err, endpoint)
	}
}

func TestNewRemoteRuntimeServiceFailsFastWhenNobodyListens(t *testing.T) {
	// A socket file left behind by a dead runtime: connect is refused.
	socket := filepath.Join(t.TempDir(), "stale.sock")
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := NewRemoteRuntimeService(context.Background(), "unix://"+socket, time.Minute, testRequestTimeout)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("took %v to fail, want < 2s", elapsed)
	}
	if err == nil || !strings.Contains(err.Error(), socket) {
		t.Fatalf("error %v should name the endpoint", err)
	}
}

func TestNewRemoteRuntimeServiceRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := NewRemoteRuntimeService(ctx, "tcp://127.0.0.1:1234", time.Second, time.Second); err == nil || !strings.Contains(err.Error(), "tcp://127.0.0.1:1234") {
		t.Errorf("tcp endpoint: error %v should name the endpoint", err)
	}
	if _, err := NewRemoteRuntimeService(ctx, "", time.Second, time.Second); !errors.Is(err, ErrInvalidEndpoint) {
		t.Errorf("empty endpoint: error %v should wrap ErrInvalidEndpoint", err)
	}
	if _, err := NewRemoteImageService(ctx, "/x.sock", time.Second, 0); err == nil {
		t.Error("zero request timeout: want an error")
	}
}
