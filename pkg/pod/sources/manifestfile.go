package sources

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pod/podvalidation"
)

// maxManifestSize bounds a manifest file or URL body: the API server's limit on a request
// body (3 MiB), so a static pod can be no larger than a pod the API would take. Upstream's
// kubelet reads up to 10 MiB and decodes whatever it got.
const maxManifestSize = 3 << 20

// maxErrorBytes bounds the text of an error about one manifest, so that its log line
// stays under 1 KiB whatever the file holds.
const maxErrorBytes = 560

// racyWindow: a file changed this shortly before it was read may change again within the
// same tick of the file system's coarse clock, leaving its stamp as it was. Without a
// watch to report that write, such a file is read once more at the next relist.
const racyWindow = time.Second

// fileStamp identifies one version of a file (see stampOf).
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mode         os.FileMode
	mtime, ctime int64
}

// manifestFile is what the source made of one version of a manifest file.
type manifestFile struct {
	stamp fileStamp
	// pod is the file's pod when it is good; err says why it is not, its text bounded
	// (a file's error is kept as long as the file, its content is not).
	pod *v1.Pod
	err error
	// documents is how many YAML documents the file holds; only the first is used.
	documents int
	// recheckAfter, when set, is when the file must be read once more even if its stamp
	// is unchanged: racyWindow after a change that came too close to the read to be
	// sure of (see racyWindow), or at once for a file that could not be opened.
	recheckAfter time.Time
}

// stale reports whether mf no longer describes the file whose stat is info.
func (mf *manifestFile) stale(info os.FileInfo) bool {
	if mf.stamp != stampOf(info) {
		return true
	}
	return !mf.recheckAfter.IsZero() && !time.Now().Before(mf.recheckAfter)
}

// errTooLarge says that a manifest is over maxManifestSize.
var errTooLarge = errors.New("larger than the 3 MiB limit for a manifest")

// readManifestData reads a manifest file of the given size (from its stat), refusing
// one over maxManifestSize before reading it. A file that grows while it is read is
// refused too rather than read past the limit.
func readManifestData(f io.Reader, size int64) ([]byte, error) {
	if size > maxManifestSize {
		return nil, tooLarge("file", size)
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead) // read without growing the buffer again
	if _, err := buf.ReadFrom(io.LimitReader(f, maxManifestSize+1)); err != nil {
		return nil, err
	}
	if buf.Len() > maxManifestSize {
		return nil, fmt.Errorf("file grew past %d bytes while read: %w", maxManifestSize, errTooLarge)
	}
	return buf.Bytes(), nil
}

func tooLarge(what string, size int64) error {
	return fmt.Errorf("%s is %.1f MiB (%d bytes), %w", what, float64(size)/(1<<20), size, errTooLarge)
}

// racyRecheck is when a file just read must be read again although its stamp did not
// change: zero when it changed long enough before now, else racyWindow after the change.
func racyRecheck(st fileStamp) time.Time {
	changed := time.Unix(0, max(st.mtime, st.ctime))
	if time.Since(changed) >= racyWindow {
		return time.Time{}
	}
	return changed.Add(racyWindow)
}

// boundError keeps at most maxErrorBytes of err's text (saying how long it was), so a
// manifest's error can be kept and logged whatever the manifest holds.
func boundError(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if len(text) <= maxErrorBytes {
		return err
	}
	return errors.New(podvalidation.Truncate(text, maxErrorBytes))
}
