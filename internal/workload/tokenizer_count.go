package workload

// counter is one count in progress. A closure over the count and a scratch
// buffer would escape to the heap through the splitter (a func value):
// three allocations for every text counted, which ttft bench pays on every
// request's output. A counter keeps them, with its emit bound once, and
// goes back to its encoder's pool.
type counter struct {
	ranks map[string]int
	text  string
	n     int
	buf   [32]int
	emit  func(a, b int)
}

func (c *counter) add(a, b int) {
	if _, ok := c.ranks[c.text[a:b]]; ok {
		c.n++
		return
	}
	c.n += len(bpeRanks(c.text[a:b], c.ranks, c.buf[:0]))
}

// count is len(encode(text)) without allocating (pieces of over 32 tokens
// aside): the same pieces merged by the same rule, so the same number
// (TestCountMatchesEncode, FuzzCount).
func (f *fastEncoder) count(text string) int {
	c, _ := f.counters.Get().(*counter)
	if c == nil {
		c = &counter{ranks: f.ranks}
		c.emit = c.add
	}
	c.text, c.n = text, 0
	f.split(text, c.emit)
	n := c.n
	c.text = "" // do not keep the caller's text alive
	f.counters.Put(c)
	return n
}
