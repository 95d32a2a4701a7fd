package serve

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/ttft-dev/ttft/internal/wire"
)

// handleTokenize answers vLLM's POST /tokenize ({"model", "prompt"} or
// {"model", "messages"} → {"count", "tokens", "max_model_len"}) with the
// tokenizer the server counts prompts with, and the generate endpoints' own
// prompt reader, so that the count is the usage a request with the same
// prompt reports. ttft bench uses it to build prompts of the length the
// server will see.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "reading the body: "+err.Error())
		return
	}
	var req wire.ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if !s.modelMatches(req.Model) {
		writeError(w, http.StatusNotFound, "NotFoundError", "The model `"+req.Model+"` does not exist.")
		return
	}
	chat := len(req.Messages) > 0
	if !chat && (len(req.Prompt) == 0 || string(req.Prompt) == "null") {
		writeError(w, http.StatusBadRequest, "BadRequestError", "either prompt or messages is required")
		return
	}
	_, ids, refused := s.prompt(&req, chat)
	if refused != nil {
		writeError(w, refused.status, refused.typ, refused.msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]any{"count": len(ids), "tokens": ids, "max_model_len": s.d.MaxModelLen})
	_, _ = w.Write(b)
}
