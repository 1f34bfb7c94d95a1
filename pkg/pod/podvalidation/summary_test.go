package podvalidation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestSummaryIsUpstreamsWordingWhenShort(t *testing.T) {
	errs := field.ErrorList{
		field.Required(field.NewPath("spec", "containers").Index(0).Child("image"), ""),
		field.NotSupported(field.NewPath("spec", "restartPolicy"), v1.RestartPolicy("Sometimes"), []string{"Always", "Never"}),
		field.Invalid(field.NewPath("spec", "activeDeadlineSeconds"), int64(-1), "must be positive"),
	}
	want := "[" + errs[0].Error() + ", " + errs[1].Error() + ", " + errs[2].Error() + "]"
	if got := Summary(errs); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestSummaryCutsLongValues(t *testing.T) {
	name := strings.Repeat("n", 2<<20)
	got := Summary(field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name, "must be no more than 253 characters")})
	want := `[metadata.name: Invalid value: "` + strings.Repeat("n", maxValueBytes) + `…" (2097152 bytes): must be no more than 253 characters]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// A cut never splits a character, and non-string values are cut too.
	got = Summary(field.ErrorList{
		field.Invalid(field.NewPath("a"), strings.Repeat("é", 100), ""),
		field.Invalid(field.NewPath("b"), strings.Split(strings.Repeat("x,", 1000), ","), ""),
	})
	if !strings.Contains(got, `"`+strings.Repeat("é", maxValueBytes/2)+`…" (200 bytes)`) || !strings.Contains(got, `["x","x",`) ||
		!strings.Contains(got, "… (4004 bytes)") {
		t.Fatalf("got %s", got)
	}
}

func TestSummaryCountsWhatDoesNotFit(t *testing.T) {
	var errs field.ErrorList
	for i := range 500 {
		errs = append(errs, field.Required(field.NewPath("spec", "containers").Index(i).Child("image"), ""))
	}
	got := Summary(errs)
	if len(got) > maxSummaryBytes+40 {
		t.Fatalf("summary of %d bytes: %s", len(got), got)
	}
	if !strings.HasPrefix(got, "[spec.containers[0].image: Required value, ") || !strings.HasSuffix(got, " more]") {
		t.Fatalf("got %s", got)
	}
	// The first error is always there, however long.
	long := Summary(field.ErrorList{field.Invalid(field.NewPath("metadata", "labels").Key(strings.Repeat("k", 5000)), "v", strings.Repeat("d", 5000))})
	if len(long) > maxFieldBytes+maxDetailBytes+100 || !strings.Contains(long, "(5017 bytes)") || !strings.Contains(long, "(5000 bytes)") {
		t.Fatalf("got %d bytes: %s", len(long), long)
	}
}

func TestQuoteBoundedAndTruncate(t *testing.T) {
	if got := QuoteBounded("web", 64); got != `"web"` {
		t.Fatalf("got %s", got)
	}
	if got := QuoteBounded("abcdef", 3); got != `"abc…" (6 bytes)` {
		t.Fatalf("got %s", got)
	}
	if got := Truncate("abcdef", 3); got != "abc… (6 bytes)" {
		t.Fatalf("got %s", got)
	}
	if got := Truncate("abc", 3); got != "abc" {
		t.Fatalf("got %s", got)
	}
}
