package criconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// emptyDirDir is where a pod's emptyDir volumes live under its pod directory.
const emptyDirDir = "volumes/kubernetes.io~empty-dir"

// fileKeyValue resolves an env var from a key of an env file (EnvFiles, beta and on by
// default since v1.35), as upstream: the file is read at container start from the pod's
// emptyDir volume (an init container usually writes it). A key that is missing, or empty,
// is skipped when optional and an error otherwise; a file that cannot be read or parsed
// is an error either way.
func fileKeyValue(pod *v1.Pod, ref *v1.FileKeySelector, podDir string) (value string, skip bool, err error) {
	volume := filepath.Join(podDir, emptyDirDir, ref.VolumeName)
	if fi, err := os.Stat(volume); podDir == "" || err != nil || !fi.IsDir() {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	file, err := secureJoin(volume, ref.Path)
	if err != nil {
		return "", false, err
	}
	value, err = readEnvFileKey(volume, file, ref.Key)
	if err != nil {
		klog.ErrorS(err, "Failed to parse env file", "pod", klog.KObj(pod))
		return "", false, errors.New("couldn't parse env file")
	}
	if value == "" {
		if ref.Optional != nil && *ref.Optional {
			return "", true, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, file)
	}
	return value, false, nil
}

// secureJoin joins unsafe to root resolving symlinks as if root were "/", so the result
// never leaves root (the rule of upstream's SecureJoin).
func secureJoin(root, unsafe string) (string, error) {
	resolved, remaining := "/", unsafe
	for links := 0; remaining != ""; {
		var part string
		part, remaining, _ = strings.Cut(remaining, "/")
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			resolved = next // a file, a directory, or not there (yet): taken as it is named
			continue
		}
		if links++; links > 255 {
			return "", fmt.Errorf("securejoin: too many symlinks in %q", unsafe)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		remaining = target + "/" + remaining
	}
	return filepath.Join(root, resolved), nil
}

// readEnvFileKey opens file (not following a final symlink, and refusing a path that a
// concurrent swap moved out of root) and returns key's value.
func readEnvFileKey(root, file, key string) (string, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("failed to open environment variable file %q: %w", file, err)
	}
	defer f.Close()
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err == nil && real != root && !strings.HasPrefix(real, root+"/") {
		return "", fmt.Errorf("environment variable file %q resolves outside its volume", file)
	}
	return parseEnvFile(f, key)
}

// parseEnvFile reads key from an env file in upstream's strict subset of POSIX shell
// syntax: KEY='value' with the value in single quotes (kept literally, and spanning lines
// until the closing quote), blank lines and # comments ignored, a comment allowed after
// the closing quote, no white space before '='; white space after '=' makes the value
// empty. "" when the key is not there.
func parseEnvFile(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", n)
		case strings.TrimRight(name, " \t") == "":
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", n)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", n)
		}
		if trimmed := strings.TrimLeft(rest, " \t"); trimmed != rest {
			if name == key {
				return "", nil // KEY= 'x' assigns the empty string, as the shell does
			}
			continue
		}
		if !strings.HasPrefix(rest, "'") {
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", n)
		}
		value, last, err := quotedValue(sc, rest[1:], n)
		if err != nil {
			return "", err
		}
		if name == key {
			return value, nil
		}
		n = last
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("error reading environment variable file: %w", err)
	}
	return "", nil
}

// quotedValue reads a single-quoted value starting with rest (after the opening quote) on
// line n, across lines until the closing quote; it returns the value and its last line.
func quotedValue(sc *bufio.Scanner, rest string, n int) (string, int, error) {
	var b strings.Builder
	start := n
	for {
		if i := strings.Index(rest, "'"); i >= 0 {
			b.WriteString(rest[:i])
			after := strings.TrimLeft(rest[i+1:], " \t")
			if after != "" && !strings.HasPrefix(after, "#") {
				return "", n, fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", n)
			}
			return b.String(), n, nil
		}
		b.WriteString(rest)
		b.WriteString("\n")
		if !sc.Scan() {
			return "", n, fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
		}
		n++
		rest = sc.Text()
	}
}
