package podvalidation

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of Summary. A manifest is read up to 3 MiB, so a single value (a name, an
// image, a label) may be megabytes long; its error must still fit a log line.
const (
	// maxValueBytes is how much of a bad value is quoted.
	maxValueBytes = 64
	// maxFieldBytes bounds a field path, which holds user keys (labels, annotations).
	maxFieldBytes = 128
	// maxDetailBytes bounds the explanation; upstream's longest (the DNS-1123 rules with
	// their regular expression) stays whole.
	maxDetailBytes = 320
	// maxSummaryBytes is the budget for the listed errors; the rest are counted.
	maxSummaryBytes = 400
)

// Summary formats errs for one log line, as upstream prints a field.ErrorList
// ("[spec.containers[0].image: Required value]"), but bounded: a quoted value longer than
// 64 bytes is cut and its length said (`Invalid value: "nnnn…" (2097152 bytes)`), field
// paths and details are cut too, and once the listed errors fill about 400 bytes the
// others are counted ("…, and 12 more"). The first error is always listed.
func Summary(errs field.ErrorList) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range errs {
		text := describe(e)
		if i > 0 && b.Len()+len(text) > maxSummaryBytes {
			fmt.Fprintf(&b, ", and %d more", len(errs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(text)
	}
	b.WriteByte(']')
	return b.String()
}

// describe is field.Error.Error() with every part bounded.
func describe(e *field.Error) string {
	s := Truncate(e.Field, maxFieldBytes) + ": " + e.Type.String()
	if value, ok := quotedValue(e); ok {
		s += ": " + value
	}
	if e.Detail != "" {
		s += ": " + Truncate(e.Detail, maxDetailBytes)
	}
	return s
}

// quotedValue renders the bad value as upstream's ErrorBody does, for the error types
// that show one.
func quotedValue(e *field.Error) (string, bool) {
	switch e.Type {
	case field.ErrorTypeInvalid, field.ErrorTypeTypeInvalid, field.ErrorTypeNotSupported,
		field.ErrorTypeNotFound, field.ErrorTypeDuplicate, field.ErrorTypeTooMany, field.ErrorTypeTooFew:
	default:
		return "", false
	}
	switch v := e.BadValue.(type) {
	case field.OmitValueType:
		return "", false
	case int64, int32, int, float64, float32, bool:
		return fmt.Sprintf("%v", v), true
	}
	if rv := reflect.ValueOf(e.BadValue); rv.Kind() == reflect.String { // string, v1.RestartPolicy, ...
		return QuoteBounded(rv.String(), maxValueBytes), true
	}
	if js, err := json.Marshal(e.BadValue); err == nil {
		return Truncate(string(js), maxValueBytes), true
	}
	if stringer, ok := e.BadValue.(fmt.Stringer); ok {
		return Truncate(stringer.String(), maxValueBytes), true
	}
	return Truncate(fmt.Sprintf("%#v", e.BadValue), maxValueBytes), true
}

// QuoteBounded quotes s like %q, keeping at most max bytes of it; a longer s is cut at a
// character boundary and followed by its length: "abc…" (2097152 bytes).
func QuoteBounded(s string, max int) string {
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (%d bytes)", prefix(s, max)+"…", len(s))
}

// Truncate keeps at most max bytes of s, cut at a character boundary and followed by its
// length when it is longer: abc… (2097152 bytes).
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", prefix(s, max), len(s))
}

// prefix is the longest start of s of at most max bytes that does not split a character.
func prefix(s string, max int) string {
	end := max
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}
