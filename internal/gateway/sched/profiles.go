package sched

import (
	"fmt"
	"strings"
)

// Policy names: each is a built-in profile (PolicyProfile).
const (
	RoundRobin       = "round-robin"
	Random           = "random"
	LeastOutstanding = "least-outstanding"
	PowerOfTwo       = "power-of-two"
	PrefixAffinity   = "prefix-affinity"
	CacheAware       = "cache-aware"
	SLOPredictive    = "slo-predictive"
	// SLOLatency is slo-predictive's profile before issue 17: every
	// request to the best sla-weighted score (predicted attainment and
	// latency), kept for comparison.
	SLOLatency = "slo-latency"
)

// Policies lists every policy name.
func Policies() []string {
	return []string{RoundRobin, Random, LeastOutstanding, PowerOfTwo, PrefixAffinity, CacheAware, SLOPredictive, SLOLatency}
}

// SLA-weighted scorer weights (article §4.3).
const (
	slaWeightCompliance = 0.6
	slaWeightLatency    = 0.4
)

// Cache-aware's overload guard: a backend busier than 1.5× the least busy
// candidate's load plus 2 gets no credit for its cached prefix.
const (
	cacheAwareOverloadFactor = 1.5
	cacheAwareOverloadSlack  = 2
)

// PolicyProfile returns the profile behind a policy, with opts' Explore
// and PanicThreshold as its plugins' parameters (defaults applied).
//
// Every policy filters alike — the request's exclusions, health, capacity,
// circuit breakers (with the panic threshold), SLO demotion — and differs
// in its scorers and picker:
//
//	round-robin        round-robin-picker
//	random             random-picker
//	least-outstanding  1×load-scorer → max-score-picker (ties: rotation)
//	power-of-two       1×load-scorer → two-choices-picker
//	prefix-affinity    1×prefix-scorer → max-score-picker (ties: least-load)
//	cache-aware        1×prefix-scorer (overload guard 1.5×least+2) → max-score-picker (ties: least-load)
//	slo-predictive     1×prefix-scorer → slo-affinity-picker (explore 3% of new groups)
//	slo-latency        0.6×slo-compliance-scorer + 0.4×latency-scorer → slo-picker (explore 3%)
func PolicyProfile(policy string, opts Options) (ProfileSpec, error) {
	opts.defaults()
	spec := ProfileSpec{Name: policy, Plugins: []PluginSpec{
		{Type: ExcludeFilterType},
		{Type: HealthFilterType},
		{Type: CapacityFilterType},
		{Type: BreakerFilterType, Params: Params{"panic_threshold": opts.PanicThreshold}},
		{Type: SLODemotionFilterType},
	}}
	add := func(ps ...PluginSpec) { spec.Plugins = append(spec.Plugins, ps...) }
	switch policy {
	case RoundRobin:
		add(PluginSpec{Type: RoundRobinPickerType})
	case Random:
		add(PluginSpec{Type: RandomPickerType})
	case LeastOutstanding:
		add(PluginSpec{Type: LoadScorerType, Weight: 1},
			PluginSpec{Type: MaxScorePickerType, Params: Params{"tie_break": TieRotation}})
	case PowerOfTwo:
		add(PluginSpec{Type: LoadScorerType, Weight: 1},
			PluginSpec{Type: TwoChoicesPickerType})
	case PrefixAffinity:
		add(PluginSpec{Type: PrefixScorerType, Weight: 1},
			PluginSpec{Type: MaxScorePickerType, Params: Params{"tie_break": TieLeastLoad}})
	case CacheAware:
		add(PluginSpec{Type: PrefixScorerType, Weight: 1, Params: Params{"overload_factor": cacheAwareOverloadFactor, "overload_slack": cacheAwareOverloadSlack}},
			PluginSpec{Type: MaxScorePickerType, Params: Params{"tie_break": TieLeastLoad}})
	case SLOPredictive:
		add(PluginSpec{Type: PrefixScorerType, Weight: 1},
			PluginSpec{Type: SLOAffinityPickerType, Params: Params{"explore": min(max(opts.Explore, 0), 1)}})
	case SLOLatency:
		add(PluginSpec{Type: SLOComplianceScorerType, Weight: slaWeightCompliance},
			PluginSpec{Type: LatencyScorerType, Weight: slaWeightLatency},
			PluginSpec{Type: SLOPickerType, Params: Params{"explore": min(max(opts.Explore, 0), 1)}})
	default:
		return ProfileSpec{}, fmt.Errorf("unknown policy %q (want one of %s)", policy, strings.Join(Policies(), ", "))
	}
	return spec, nil
}
