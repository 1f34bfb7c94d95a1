package kubeletserver

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	"k8s.io/klog/v2"
)

// installDebugFlags serves /debug/flags/v: a PUT with a number sets klog's verbosity at
// run time, as upstream's StringFlagPutHandler with GlogSetter does.
func (s *Server) installDebugFlags(mux *http.ServeMux) {
	if !s.opts.EnableDebugFlagsHandler {
		mux.Handle(debugFlagPath, disabledEndpoint("flags endpoint is disabled."))
		return
	}
	mux.HandleFunc(debugFlagPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			writePlain(w, http.StatusNotAcceptable, "unsupported http method")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
		if err != nil {
			writePlain(w, http.StatusBadRequest, "error reading request body: "+err.Error())
			return
		}
		msg, err := setVerbosity(string(body))
		if err != nil {
			writePlain(w, http.StatusBadRequest, err.Error())
			return
		}
		writePlain(w, http.StatusOK, msg)
	})
}

// setVerbosity sets klog's -v.
func setVerbosity(val string) (string, error) {
	if _, err := strconv.ParseUint(val, 10, 32); err != nil {
		return "", err
	}
	var level klog.Level
	if err := level.Set(val); err != nil {
		return "", fmt.Errorf("failed set klog.logging.verbosity %s: %v", val, err)
	}
	return fmt.Sprintf("successfully set klog.logging.verbosity to %s", val), nil
}

// writePlain is upstream's flag handler answer: text and a newline.
func writePlain(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}
