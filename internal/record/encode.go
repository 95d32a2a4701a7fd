package record

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ttft-dev/ttft/internal/jsonscan"
)

// AppendJSON appends r as one line of requests.jsonl (its JSON and a
// newline), byte for byte what encoding/json's Encoder writes for it, and
// reports true; false (b unchanged) for a record encoding/json would refuse
// or that this encoder does not know how to write (a NaN or infinite
// duration, a time outside years 0–9999), which the caller then gives to
// encoding/json for its answer.
//
// It exists because a bench run writes one line per request through to
// the file, and encoding/json's reflection, its time.Time marshaller and
// its compaction of each marshaller's output were ≈ 9 µs of a request's
// ≈ 90 µs of client CPU at 1,000 streams (TestCPUPerRequestAgainstMinimalClient);
// this writes the same bytes in about a tenth of that, without allocating
// beyond b's growth. Its field list follows Record's: TestAppendJSONMatches
// sets every field of Record by reflection, so a field added there and
// forgotten here fails the test.
func AppendJSON(b []byte, r *Record) ([]byte, bool) {
	start := len(b)
	e := recordEncoder{b: b}
	e.b = append(e.b, `{"index":`...)
	e.b = strconv.AppendInt(e.b, int64(r.Index), 10)
	e.str(`,"id":`, r.ID)
	e.flag(`,"warmup":true`, r.Warmup)
	e.str(`,"source":`, r.Source)
	e.str(`,"target":`, r.Target)
	e.str(`,"backend":`, r.Backend)
	e.str(`,"api":`, r.API)
	e.str(`,"model":`, r.Model)
	e.str(`,"response_id":`, r.ResponseID)
	e.str(`,"response_model":`, r.ResponseModel)
	e.str(`,"scenario":`, r.Scenario)
	e.str(`,"session":`, r.Session)
	e.int(`,"turn":`, r.Turn)
	e.str(`,"group":`, r.Group)

	e.time(`,"intended":`, r.Intended, false)
	e.time(`,"sent":`, r.Sent, false)
	e.time(`,"written":`, r.Written, true)
	e.time(`,"first_byte":`, r.FirstByte, true)
	e.time(`,"first_event":`, r.FirstEvent, true)
	e.time(`,"first_token":`, r.FirstToken, true)
	e.time(`,"first_content":`, r.FirstContent, true)
	e.time(`,"end":`, r.End, false)

	e.float(`,"ttft_ms":`, r.TTFTMs)
	e.float(`,"ttft_intended_ms":`, r.TTFTIntendedMs)
	e.float(`,"ttfb_ms":`, r.TTFBMs)
	e.float(`,"ttfe_ms":`, r.TTFEMs)
	e.float(`,"ttfc_ms":`, r.TTFCMs)
	e.float(`,"e2e_ms":`, r.E2EMs)
	e.float(`,"tpot_ms":`, r.TPOTMs)
	e.float(`,"schedule_lag_ms":`, r.ScheduleLagMs)
	if len(r.ITLMs) > 0 {
		e.b = append(e.b, `,"itl_ms":[`...)
		for i, v := range r.ITLMs {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.number(v)
		}
		e.b = append(e.b, ']')
	}
	e.int(`,"coalesced_events":`, r.CoalescedEvents)

	e.str(`,"arrival_clock":`, r.ArrivalClock)
	e.float(`,"first_token_read_delay_ms":`, r.FirstTokenReadDelayMs)

	e.float(`,"dns_ms":`, r.DNSMs)
	e.float(`,"connect_ms":`, r.ConnectMs)
	e.float(`,"tls_ms":`, r.TLSMs)
	e.flag(`,"reused_conn":true`, r.ReusedConn)

	e.int(`,"prompt_tokens":`, r.PromptTokens)
	e.int(`,"prompt_tokens_usage":`, r.PromptTokensUsage)
	e.int(`,"cached_prompt_tokens":`, r.CachedPromptTokens)
	e.int(`,"output_tokens_usage":`, r.OutputTokensUsage)
	e.int(`,"output_tokens_tokenizer":`, r.OutputTokensTokenizer)
	e.int(`,"output_events":`, r.OutputEvents)
	e.int(`,"reasoning_events":`, r.ReasoningEvents)
	e.int(`,"max_tokens":`, r.MaxTokens)
	if r.Temperature != nil {
		e.b = append(e.b, `,"temperature":`...)
		e.number(*r.Temperature)
	}

	e.flag(`,"not_streamed":true`, r.NotStreamed)

	e.int(`,"status":`, r.Status)
	e.str(`,"finish_reason":`, r.FinishReason)
	e.str(`,"error_class":`, r.ErrorClass)
	e.str(`,"error":`, r.Error)

	if len(r.ServerTimings) > 0 {
		// encoding/json sorts a map's keys.
		keys := make([]string, 0, len(r.ServerTimings))
		for k := range r.ServerTimings {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		e.b = append(e.b, `,"server_timings":{`...)
		for i, k := range keys {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = jsonscan.AppendStringStd(e.b, k)
			e.b = append(e.b, ':')
			e.number(r.ServerTimings[k])
		}
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, '}', '\n')
	if e.bad {
		return e.b[:start], false
	}
	return e.b, true
}

// recordEncoder appends fields; bad records that a value needs
// encoding/json's own answer.
type recordEncoder struct {
	b   []byte
	bad bool
}

// str appends a string field under omitempty.
func (e *recordEncoder) str(key, s string) {
	if s == "" {
		return
	}
	e.b = append(e.b, key...)
	e.b = jsonscan.AppendStringStd(e.b, s)
}

// flag appends a true bool field (omitempty: false is left out).
func (e *recordEncoder) flag(field string, v bool) {
	if v {
		e.b = append(e.b, field...)
	}
}

// int appends an int field under omitempty.
func (e *recordEncoder) int(key string, v int) {
	if v == 0 {
		return
	}
	e.b = append(e.b, key...)
	e.b = strconv.AppendInt(e.b, int64(v), 10)
}

// float appends a float64 field under omitempty (0 and -0 are left out).
func (e *recordEncoder) float(key string, v float64) {
	if v == 0 {
		return
	}
	e.b = append(e.b, key...)
	e.number(v)
}

// time appends a time field, left out when zero under omitzero, as
// time.Time's MarshalJSON writes it (RFC 3339 with nanoseconds).
func (e *recordEncoder) time(key string, t time.Time, omitZero bool) {
	if omitZero && t.IsZero() {
		return
	}
	e.b = append(e.b, key...)
	e.b = append(e.b, '"')
	b, err := t.AppendText(e.b)
	if err != nil {
		e.bad = true
		return
	}
	e.b = append(b, '"')
}

// number appends a float64 as encoding/json does: the shortest decimal
// that reads back the same, in exponent form only below 1e-6 or from 1e21,
// with the exponent's leading zero dropped. NaN and ±Inf are refused.
func (e *recordEncoder) number(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		e.bad = true
		return
	}
	if b, ok := appendNanosAsMs(e.b, f); ok {
		e.b = b
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(e.b); n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}

// appendNanosAsMs is number's fast path for what most of a record's
// numbers are: a whole number of nanoseconds in milliseconds (Finalize's
// float64(d) / 1e6). When f is exactly the double nearest k/1e6 for an
// integer k of at most 15 digits, the decimal k/1e6 is f's shortest
// round-trip form (it reads back as f, and no other decimal of 15 or fewer
// significant digits lies within f's half-ulp), which is what
// strconv.AppendFloat(f, 'f', -1, 64) writes, found here by integer
// arithmetic instead of its general search. Anything else (false) takes
// the general path; FuzzAppendJSON checks both against encoding/json.
func appendNanosAsMs(b []byte, f float64) ([]byte, bool) {
	const limit = 1e15 // k of at most 15 digits
	k := math.Round(f * 1e6)
	if !(math.Abs(k) < limit) || k/1e6 != f || math.Signbit(f) && f == 0 { // -0 is written "-0"
		return b, false
	}
	n := int64(k)
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	b = strconv.AppendInt(b, n/1e6, 10)
	if frac := n % 1e6; frac != 0 {
		var d [7]byte
		d[0] = '.'
		for i := 6; i >= 1; i-- {
			d[i] = byte('0' + frac%10)
			frac /= 10
		}
		end := 7
		for d[end-1] == '0' {
			end--
		}
		b = append(b, d[:end]...)
	}
	return b, true
}
