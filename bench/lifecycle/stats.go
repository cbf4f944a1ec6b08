package main

import (
	"math"
	"math/rand/v2"
	"sort"
)

// quantile returns the q-quantile of xs (linear interpolation between order statistics,
// the "R-7" definition that numpy and most spreadsheets use). NaN for an empty slice.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }
func p90(xs []float64) float64    { return quantile(xs, 0.9) }

// pairedRatios returns a[i]/b[i].
func pairedRatios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range a {
		if i < len(b) && b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// bootstrapRatioCI returns a 95% percentile-bootstrap interval for median(a)/median(b),
// resampling whole pairs (so the pairing, and with it the drift protection, is kept).
func bootstrapRatioCI(a, b []float64, rng *rand.Rand) (lo, hi float64) {
	n := len(a)
	if n == 0 || len(b) != n {
		return math.NaN(), math.NaN()
	}
	const reps = 4000
	ratios := make([]float64, reps)
	ra, rb := make([]float64, n), make([]float64, n)
	for r := range ratios {
		for i := 0; i < n; i++ {
			j := rng.IntN(n)
			ra[i], rb[i] = a[j], b[j]
		}
		ratios[r] = median(ra) / median(rb)
	}
	return quantile(ratios, 0.025), quantile(ratios, 0.975)
}
