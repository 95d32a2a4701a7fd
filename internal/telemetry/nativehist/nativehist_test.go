package nativehist

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestOptsFollowEnv(t *testing.T) {
	base := prometheus.HistogramOpts{Name: "x", Buckets: []float64{1}}
	for _, c := range []struct {
		val  string
		want bool
	}{{"", false}, {"0", false}, {"false", false}, {"no", false}, {"1", true}, {"true", true}, {"TRUE", true}} {
		t.Setenv(Env, c.val)
		o := Opts(base)
		if Enabled() != c.want || (o.NativeHistogramBucketFactor != 0) != c.want {
			t.Errorf("%s=%q: Enabled %v, bucket factor %v; want enabled %v", Env, c.val, Enabled(), o.NativeHistogramBucketFactor, c.want)
		}
		if c.want && (o.NativeHistogramMaxBucketNumber != MaxBucketNumber || o.NativeHistogramMinResetDuration != MinResetDuration) {
			t.Errorf("%s=%q: native settings %+v", Env, c.val, o)
		}
		if o.Name != "x" || len(o.Buckets) != 1 {
			t.Errorf("%s=%q: classic options changed: %+v", Env, c.val, o)
		}
	}
}
