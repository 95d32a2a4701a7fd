package serve

import "testing"

func FuzzParseFleet(f *testing.F) {
	f.Add("replicas:\n  - {model: llama-3.1-8b, gpu: h100-sxm, count: 2}\n")
	f.Add("replicas: []")
	f.Add("replicas:\n  - {model: a, gpu: b, count: -1}")
	f.Fuzz(func(t *testing.T, s string) {
		cfgs, err := ParseFleet([]byte(s))
		if err != nil {
			return
		}
		if len(cfgs) == 0 {
			t.Fatal("accepted a fleet with no replicas")
		}
		for _, c := range cfgs {
			if c.Model == "" || c.GPU == "" || c.Count != 0 {
				t.Fatalf("accepted replica %+v", c)
			}
		}
	})
}
