package host

import (
	"cmp"
	"slices"
)

// Median of s (the mean of the middle two for an even count); the zero value for none.
func Median[T ~int64 | ~float64](s []T) T {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n%2 == 0 {
		return (c[n/2-1] + c[n/2]) / 2
	}
	return c[n/2]
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of s.
func Percentile[T cmp.Ordered](s []T, p float64) T {
	var zero T
	if len(s) == 0 {
		return zero
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(float64(len(c))*p/100+0.999999) - 1
	return c[max(0, min(i, len(c)-1))]
}
