package kubeletserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// installSystemLogs serves the node's log directory under /logs/ (enableSystemLogHandler);
// with enableSystemLogQuery, /logs/?query=... also reads services' journals, as upstream's
// node log query does.
func (s *Server) installSystemLogs(mux *http.ServeMux) {
	if !s.opts.EnableSystemLogHandler {
		mux.Handle(logsPath, disabledEndpoint("logs endpoint is disabled."))
		return
	}
	files := http.StripPrefix(logsPath, logFiles(s.opts.NodeLogDir))
	if !s.opts.EnableSystemLogQuery {
		mux.Handle(logsPath, getOnly(files))
		return
	}
	mux.Handle(logsPath, getOnly(http.StripPrefix(logsPath, &logQueryHandler{dir: s.opts.NodeLogDir, files: logFiles(s.opts.NodeLogDir)})))
}

// logFiles serves files and listings from dir. Unlike upstream's http.Dir it does not
// follow symbolic links out of dir.
func logFiles(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		defer root.Close()
		http.FileServerFS(root.FS()).ServeHTTP(w, r)
	})
}

// Limits of the node log query, as upstream.
const (
	journalDateLayout = "2006-1-2 15:4:5"
	maxTailLines      = 100000
	maxServiceLength  = 256
	maxServices       = 4
	logQueryTimeout   = 30 * time.Second
)

// unsafeServiceChars: anything outside these could build an unexpected journalctl argument.
var unsafeServiceChars = regexp.MustCompile(`[^a-zA-Z\-_.:0-9@]+`)

// nodeLogQuery is a parsed /logs/?query=... request: services (journal units) or one file.
type nodeLogQuery struct {
	services  []string
	files     []string
	sinceTime *time.Time
	untilTime *time.Time
	tailLines *int
	boot      *int
	pattern   string
}

func (q *nodeLogQuery) hasOptions() bool {
	return q.sinceTime != nil || q.untilTime != nil || q.tailLines != nil || q.boot != nil || q.pattern != ""
}

// parseNodeLogQuery reads the query parameters; nil when none is present.
func parseNodeLogQuery(v url.Values) (*nodeLogQuery, field.ErrorList) {
	var errs field.ErrorList
	q := &nodeLogQuery{pattern: v.Get("pattern")}
	queries, present := v["query"]
	for _, s := range queries {
		switch {
		case strings.ContainsAny(s, `/\`):
			q.files = append(q.files, s)
		case strings.TrimSpace(s) != "":
			q.services = append(q.services, s)
		}
	}
	if present && len(q.files) == 0 && len(q.services) == 0 {
		errs = append(errs, field.Invalid(field.NewPath("query"), queries, "may not be empty"))
	}
	for name, dst := range map[string]**time.Time{"sinceTime": &q.sinceTime, "untilTime": &q.untilTime} {
		if s := v.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				errs = append(errs, field.Invalid(field.NewPath(name), s, "invalid time format"))
				continue
			}
			*dst = &t
		}
	}
	for name, dst := range map[string]**int{"boot": &q.boot, "tailLines": &q.tailLines} {
		if s := v.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				errs = append(errs, field.Invalid(field.NewPath(name), s, err.Error()))
				continue
			}
			*dst = &n
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(q.services) == 0 && len(q.files) == 0 && !q.hasOptions() {
		return nil, nil
	}
	return q, nil
}

// validate checks a query the way upstream does before running anything.
func (q *nodeLogQuery) validate(dir string) field.ErrorList {
	var errs field.ErrorList
	for _, s := range q.services {
		if len(s) > maxServiceLength {
			errs = append(errs, field.Invalid(field.NewPath("query"), s, fmt.Sprintf("length must be less than %d", maxServiceLength)))
		} else if unsafeServiceChars.MatchString(s) {
			errs = append(errs, field.Invalid(field.NewPath("query"), s, "input contains unsupported characters"))
		}
	}
	if len(q.services) > maxServices {
		errs = append(errs, field.TooMany(field.NewPath("query"), len(q.services), maxServices))
	}
	switch {
	case len(q.files) == 0 && len(q.services) == 0:
		errs = append(errs, field.Required(field.NewPath("query"), "cannot be empty with options"))
	case len(q.files) > 0 && len(q.services) > 0:
		errs = append(errs, field.Invalid(field.NewPath("query"), fmt.Sprintf("%v, %v", q.files, q.services), "cannot specify a file and service"))
	case len(q.files) > 1:
		errs = append(errs, field.Invalid(field.NewPath("query"), q.files, "cannot specify more than one file"))
	case len(q.files) == 1 && q.hasOptions():
		errs = append(errs, field.Invalid(field.NewPath("query"), q.files, "cannot specify file with options"))
	case len(q.files) == 1:
		if err := statInRoot(dir, q.files[0]); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), q.files, err.Error()))
		}
	}
	if q.sinceTime != nil && q.untilTime != nil && q.sinceTime.After(*q.untilTime) {
		errs = append(errs, field.Invalid(field.NewPath("untilTime"), q.untilTime, "must be after `sinceTime`"))
	}
	if q.boot != nil && *q.boot > 0 {
		errs = append(errs, field.Invalid(field.NewPath("boot"), *q.boot, "must be less than 1"))
	}
	if q.tailLines != nil && (*q.tailLines < 0 || *q.tailLines > maxTailLines) {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *q.tailLines, fmt.Sprintf("must be between %d and %d, inclusive", 0, maxTailLines)))
	}
	if _, err := syntax.Parse(q.pattern, syntax.Perl); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("pattern"), q.pattern, err.Error()))
	}
	return errs
}

func statInRoot(dir, name string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	_, err = root.Stat(strings.TrimPrefix(name, "/"))
	return err
}

// logQueryHandler answers /logs/ requests (prefix stripped) in query mode; requests
// without a query are served as files.
type logQueryHandler struct {
	dir   string
	files http.Handler
}

func (h *logQueryHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q, errs := parseNodeLogQuery(r.URL.Query())
	if len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusBadRequest)
		return
	}
	if q == nil {
		h.files.ServeHTTP(w, r)
		return
	}
	if r.URL.Path != "/" && r.URL.Path != "" {
		http.Error(w, "path not allowed in query mode", http.StatusNotAcceptable)
		return
	}
	if errs := q.validate(h.dir); len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusNotAcceptable)
		return
	}
	if len(q.files) == 1 {
		r2 := r.Clone(r.Context())
		r2.URL.Path = q.files[0]
		h.files.ServeHTTP(w, r2)
		return
	}
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	var out io.Writer = w
	if r.Header.Get("Accept-Encoding") == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
	}
	ctx, cancel := context.WithTimeout(r.Context(), logQueryTimeout)
	defer cancel()
	q.copyServices(ctx, h.dir, out)
}

// copyServices writes the journal of the services that log to it and, for the others,
// their log file under the log directory.
func (q *nodeLogQuery) copyServices(ctx context.Context, dir string, w io.Writer) {
	var journal, files []string
	units := journalUnits(ctx)
	for _, s := range q.services {
		if strings.Contains(units, s+".service") {
			journal = append(journal, s)
		} else {
			files = append(files, s)
		}
	}
	if len(journal) > 0 {
		cmd := exec.CommandContext(ctx, "journalctl", q.journalArgs(journal)...)
		cmd.Stdout, cmd.Stderr = w, w
		var exitErr *exec.ExitError
		if err := cmd.Run(); err != nil && !errors.As(err, &exitErr) && (q.boot == nil || *q.boot == 0) {
			fmt.Fprintf(w, "\nerror: journal output not available\n")
		}
	}
	if len(files) > 0 && q.hasOptions() {
		fmt.Fprintf(w, "\noptions present and query resolved to log files for %v\ntry without specifying options\n", files)
		return
	}
	for _, s := range files {
		copyServiceLogFile(ctx, w, dir, s)
	}
}

// journalUnits lists the systemd units that have journal entries ("" without journalctl).
func journalUnits(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "journalctl", "--field", "_SYSTEMD_UNIT").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func (q *nodeLogQuery) journalArgs(services []string) []string {
	args := []string{"--utc", "--no-pager", "--output=short-precise"}
	if q.sinceTime != nil {
		args = append(args, "--since="+q.sinceTime.Format(journalDateLayout))
	}
	if q.untilTime != nil {
		args = append(args, "--until="+q.untilTime.Format(journalDateLayout))
	}
	if q.tailLines != nil {
		args = append(args, "--pager-end", fmt.Sprintf("--lines=%d", *q.tailLines))
	}
	for _, s := range services {
		args = append(args, "--unit="+s)
	}
	if q.pattern != "" {
		args = append(args, "--grep="+q.pattern)
	}
	if q.boot != nil {
		args = append(args, "--boot", strconv.Itoa(*q.boot))
	}
	return args
}

// copyServiceLogFile copies the first of <dir>/<s>, <dir>/<s>.log and <dir>/<s>/<s>.log
// that is a file, as upstream's heuristics do.
func copyServiceLogFile(ctx context.Context, w io.Writer, dir, service string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", service, err)
		return
	}
	defer root.Close()
	for _, name := range []string{service, service + ".log", service + "/" + service + ".log"} {
		err = copyFileInRoot(ctx, w, root, name)
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(w, "\nlog not found for %s\n", service)
	case err != nil:
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", service, err)
	}
}

func copyFileInRoot(ctx context.Context, w io.Writer, root *os.Root, name string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return err
	} else if st.IsDir() {
		return os.ErrNotExist
	}
	_, err = io.Copy(w, ctxReader{ctx: ctx, r: f})
	return err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
