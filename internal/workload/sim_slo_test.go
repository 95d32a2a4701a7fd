package workload_test

import (
	"context"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/workload"
)

// The code scenario's verdict flips from PASS on a fast deployment to FAIL
// on one too slow for it, with the simulator on its virtual clock.
func TestScenarioVerdictFlipsOnSlowSimulator(t *testing.T) {
	verdict := func(gpu string) ([]record.SLOVerdict, record.Goodput) {
		sc, _ := workload.BuiltinScenario("code")
		src, err := workload.NewGenerated(workload.GenOptions{
			Seed: 1, Requests: 120, Scenario: sc.Name,
			Prompt: sc.PromptTokens, Output: sc.OutputTokens, ForceOutput: sc.ForceOutput,
			Prefix: sc.Prefix, Arrival: sc.Arrival, Schedule: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		d, err := sim.Resolve(sim.DefaultCatalog(), sim.Config{Model: "llama-3.1-8b", GPU: gpu, EnablePrefixCaching: true, MaxModelLen: 8192})
		if err != nil {
			t.Fatal(err)
		}
		var recs []record.Record
		_, err = sim.Run(context.Background(), d, src, sim.RunOptions{Concurrency: 64, Seed: 1}, func(r *record.Record) error {
			recs = append(recs, *r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sum := stats.Summarize(recs, stats.SummaryOptions{Source: "sim", Seed: 1})
		return sc.Evaluate(sum, recs)
	}
	fast, gFast := verdict("h100-sxm")
	slow, gSlow := verdict("l4")
	t.Logf("h100: %+v goodput %+v", fast, gFast)
	t.Logf("l4:   %+v goodput %+v", slow, gSlow)
	if !workload.Passed(fast) {
		t.Errorf("code scenario fails on an H100: %+v", fast)
	}
	if workload.Passed(slow) {
		t.Errorf("code scenario passes on an L4: %+v", slow)
	}
	if !(gFast.Attainment > gSlow.Attainment) {
		t.Errorf("attainment h100 %.2f not above l4 %.2f", gFast.Attainment, gSlow.Attainment)
	}
}
