package sim

import (
	"math"
	"testing"
)

// TestWeightFormatBytes: int4/int8 weights cost bits/8 of a 16-bit weight
// plus one 16-bit scale per group (and a 4-bit zero point for awq/gptq),
// for every model and group size in the catalog (property, fixed grid).
func TestWeightFormatBytes(t *testing.T) {
	cat := DefaultCatalog()
	for _, m := range cat.Models {
		for _, g := range []int{32, 64, 128, 256} {
			fp16, _ := parseWeightFormat("", g)
			ref := fp16.modelBytes(&m)
			for _, tc := range []struct {
				q    string
				want float64 // fraction of the 16-bit bytes, whole model quantized
			}{
				{"int4", 0.25 + 1/float64(g)},
				{"int8", 0.5 + 1/float64(g)},
			} {
				f, err := parseWeightFormat(tc.q, g)
				if err != nil {
					t.Fatal(err)
				}
				got := f.modelBytes(&m) / ref
				if math.Abs(got-tc.want) > 1e-9 {
					t.Errorf("%s %s g%d: %.5f of fp16 bytes, want %.5f", m.Name, tc.q, g, got, tc.want)
				}
				if got <= map[string]float64{"int4": 0.25, "int8": 0.5}[tc.q] {
					t.Errorf("%s %s g%d: scales not counted", m.Name, tc.q, g)
				}
			}
			// awq keeps the embeddings and head 16-bit: between int4 and fp16.
			awq, _ := parseWeightFormat("awq", g)
			i4, _ := parseWeightFormat("int4", g)
			if a := awq.modelBytes(&m); a <= i4.modelBytes(&m) || a >= ref {
				t.Errorf("%s awq g%d: %.3g bytes not between int4 and fp16", m.Name, g, a)
			}
		}
	}
	if _, err := parseWeightFormat("int3", 0); err == nil {
		t.Error("int3 accepted")
	}
	if _, err := parseWeightFormat("int4", -1); err == nil {
		t.Error("negative group size accepted")
	}
}

// TestQuantizedTiming: on every device, int4 and int8 weights make a
// memory-bound decode step faster than 16-bit, and a prefill step never
// faster than the compute roofline of its math: 16-bit for weight-only
// formats on GPUs (plus the dequantisation overhead), the int8 rate where
// the engine runs int8 activations (llama.cpp on CPUs).
func TestQuantizedTiming(t *testing.T) {
	for _, dev := range []struct{ gpu, engine string }{{"a100-80gb", "vllm"}, {"h100-sxm", "vllm"}, {"l4", "vllm"}, {"xeon-8480", "llamacpp"}, {"apple-m2-pro", "llamacpp"}} {
		base, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: dev.gpu, Engine: dev.engine, MaxModelLen: 4096})
		if err != nil {
			t.Fatal(err)
		}
		prevDecode := base.DecodeTime(1, 512).Total
		for _, q := range []string{"int8", "int4"} {
			for _, g := range []int{32, 128} {
				d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: dev.gpu, Engine: dev.engine, MaxModelLen: 4096, Quantization: q, QuantGroupSize: g})
				if err != nil {
					t.Fatal(err)
				}
				if dt := d.DecodeTime(1, 512).Total; dt >= base.DecodeTime(1, 512).Total {
					t.Errorf("%s %s g%d: decode %.2f ms not below 16-bit %.2f ms", dev.gpu, q, g, dt*1e3, base.DecodeTime(1, 512).Total*1e3)
				}
				for _, n := range []int{512, 2048, 8192} {
					p, p16 := d.PrefillTime(n, 0), base.PrefillTime(n, 0)
					// base.Compute scaled to d's peak bounds d's compute
					// from below (attention stays 16-bit in both).
					floor := p16.Compute * base.peakFLOPS / d.peakFLOPS
					if d.ComputeDtype != "int8" && floor != p16.Compute {
						t.Errorf("%s %s: weight-only format changed the compute dtype to %s", dev.gpu, q, d.ComputeDtype)
					}
					if p.Compute < floor || p.Total < floor {
						t.Errorf("%s %s g%d prefill %d: %.2f ms below the %s compute roofline %.2f ms", dev.gpu, q, g, n, p.Total*1e3, d.ComputeDtype, floor*1e3)
					}
				}
				if d.WeightGBGPU >= base.WeightGBGPU {
					t.Errorf("%s %s: %.1f GB of weights, 16-bit %.1f", dev.gpu, q, d.WeightGBGPU, base.WeightGBGPU)
				}
			}
			// Fewer bits, faster decode: int4 below int8.
			d, _ := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: dev.gpu, Engine: dev.engine, MaxModelLen: 4096, Quantization: q})
			if dt := d.DecodeTime(1, 512).Total; dt >= prevDecode {
				t.Errorf("%s %s: decode %.2f ms not below the wider format's %.2f ms", dev.gpu, q, dt*1e3, prevDecode*1e3)
			} else {
				prevDecode = dt
			}
		}
	}
}

// TestEdgeDevicesResolve: the CPU/edge catalog entries size a KV cache for
// an 8B model in 4 bits, and plan leaves them out by default.
func TestEdgeDevicesResolve(t *testing.T) {
	for _, g := range []string{"raspberry-pi-5", "apple-m2-pro", "xeon-8480"} {
		d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: g, Engine: "llamacpp", Quantization: "int4"})
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		if d.GPU.Class == "" {
			t.Errorf("%s has no class", g)
		}
		if d.NumBlocks*d.BlockSize < d.MaxModelLen {
			t.Errorf("%s: KV cache %d tokens", g, d.NumBlocks*d.BlockSize)
		}
	}
	// 16-bit Llama-3-8B (16 GB) does not fit a Pi 5's 8 GB.
	if _, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: "rpi5", Engine: "llamacpp"}); err == nil {
		t.Error("16-bit 8B accepted on a Pi 5")
	}
}
