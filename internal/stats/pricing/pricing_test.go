package pricing

import (
	"strings"
	"testing"
)

func TestDefaultAndLookup(t *testing.T) {
	l := Default()
	p, ok := l.API("gpt-4-turbo-2024-04-09")
	if !ok || p.Input != 10 || p.Output != 30 {
		t.Errorf("gpt-4-turbo dated: %+v %v", p, ok)
	}
	if _, ok := l.API("gpt-4"); ok {
		t.Error("gpt-4 must not match gpt-4-turbo or gpt-4o")
	}
	if p, ok := l.API("Claude_3_Opus"); !ok || p.Output != 75 {
		t.Errorf("normalised lookup: %+v %v", p, ok)
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		name, in, want string
		gpu            string
		price          float64
	}{
		{"yaml", "gpus:\n  A10G: 1.2\n", "", "a10g", 1.2},
		{"csv", "kind,name,price,output\ngpu,L4,0.7\napi,my-llm,1,2\n", "", "l4", 0.7},
		{"negative", "gpus: {a10g: -1}\n", "gpus.a10g: price -1", "", 0},
		{"unknown key", "gpu: {a10g: 1}\n", "field gpu not found", "", 0},
		{"csv kind", "kind,name,price\ntpu,v5e,1\n", "x.csv:2: kind \"tpu\"", "", 0},
		{"csv api half", "kind,name,price\napi,m,1\n", "x.csv:2: an api price needs", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse(strings.NewReader(tc.in), "x.csv")
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := l.GPU(tc.gpu); !ok || v != tc.price {
				t.Errorf("GPU(%s) = %v %v", tc.gpu, v, ok)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add("gpus:\n  a10g: 1.01\napis:\n  m: {input: 1, output: 2}\n")
	f.Add("kind,name,price,output\ngpu,l4,0.8\napi,m,1,2\n")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(strings.NewReader(s), "fuzz")
		if err != nil {
			return
		}
		for k, v := range l.GPUs {
			if v < 0 || k != Norm(k) {
				t.Fatalf("accepted %q: %v", k, v)
			}
		}
	})
}
