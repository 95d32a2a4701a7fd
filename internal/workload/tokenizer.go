package workload

// Tokenizer counts and produces tokens offline. Implementations are safe for
// concurrent use.
type Tokenizer interface {
	Name() string
	Encode(text string) []int
	Decode(ids []int) string
	Count(text string) int
}
