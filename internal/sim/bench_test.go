package sim

import (
	"context"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
)

// BenchmarkRun100k simulates 100,000 requests of a loaded 70B deployment
// (Llama-3-70B, TP4 H100, 1024-token prompts, 128-token outputs, Poisson at
// 80% of capacity) per iteration. Target: < 10 s on one core.
//
//	go test ./internal/sim -run '^$' -bench Run100k -benchtime 1x -cpu 1
func BenchmarkRun100k(b *testing.B) {
	d, err := Resolve(nil, Config{Model: "llama-3-70b", GPU: "h100-sxm", TensorParallelSize: 4})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		n := 0
		_, err := Run(context.Background(), d, &fixedSource{n: 100_000, prompt: 1024, out: 128}, RunOptions{Rate: 9, Seed: 1}, func(r *record.Record) error {
			n++
			return nil
		})
		if err != nil || n != 100_000 {
			b.Fatalf("run: %v (%d records)", err, n)
		}
	}
}
