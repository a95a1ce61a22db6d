package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/jsonindent"
)

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
	// Field names the offending request field of a 400, when known.
	Field string `json:"field,omitempty"`
	// Code is the gRPC code name when a CSI plugin answered with an error.
	Code string `json:"code,omitempty"`
}

// httpError is an error the API itself raises with a fixed status.
type httpError struct {
	status int
	msg    string
	field  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &httpError{status: http.StatusBadRequest, msg: msg, field: field}
}

// badChoice refuses a value of an enumerated parameter or field, naming
// every value it takes (one wording for every enumeration of the API).
func badChoice[T ~string](field string, got T, valid ...T) error {
	return badRequest(field, "must be one of %s, got %q", structs.Choices(valid...), got)
}

// StatusFor maps an error onto an HTTP status by type, never by message
// (the reference system matches error strings across RPC).
func StatusFor(err error) int {
	var he *httpError
	var ve *structs.ValidationError
	var mbe *http.MaxBytesError
	var pe *structs.ProbeError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &ve), errors.As(err, &pe):
		return http.StatusBadRequest
	case errors.Is(err, structs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, structs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, structs.ErrPermissionDenied):
		// Refused where it is decided, not by the route's rule: a
		// registration whose token was revoked before it committed, an
		// upload a signed module_source does not allow.
		return http.StatusForbidden
	case errors.Is(err, structs.ErrNoLeader), errors.Is(err, structs.ErrOutcomeUnknown), errors.Is(err, structs.ErrUnavailable):
		// Outcome unknown: 503 too, with a message saying the write may
		// be recorded and a retry is safe: undoing a write that may have
		// committed would undo CSI work a recorded claim needs.
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	if _, ok := grpcStatus(err); ok {
		// A CSI plugin answered with an error the backend did not classify.
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// grpcStatus finds a gRPC status anywhere in err's chain.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus(), true
	}
	return nil, false
}

// WriteError answers err as JSON with the status StatusFor gives it.
func WriteError(w http.ResponseWriter, err error) {
	resp := ErrorResponse{Error: oneLine(err.Error())}
	var he *httpError
	var ve *structs.ValidationError
	var pe *structs.ProbeError
	switch {
	case errors.As(err, &he):
		resp.Field = he.field
	case errors.As(err, &ve):
		resp.Field = ve.Field
	case errors.As(err, &pe):
		resp.Field = pe.Field
	}
	if st, ok := grpcStatus(err); ok {
		resp.Code = st.Code().String()
	}
	WriteJSON(w, StatusFor(err), resp)
}

// WriteJSON answers v as JSON with the given status, indented by two
// spaces. The value is encoded compact and then indented by jsonindent,
// which writes what the encoder's own SetIndent does in a fraction of its
// CPU.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":"encoding response failed"}`, http.StatusInternalServerError)
		return
	}
	compact := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	out := jsonindent.Append(make([]byte, 0, len(compact)*3/2+1), compact, "  ")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(out, '\n'))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// decodeBody decodes exactly one JSON value into v, refusing unknown
// fields, bodies over the limit and trailing data, each with one error
// naming what is wrong.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	// A declared length over the limit is refused before one byte is read.
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return tooLarge(s.cfg.MaxBodyBytes)
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return s.decodeError(err)
	}
	// Exactly one value: anything but whitespace after it is an error.
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		if err == nil {
			return badRequest("", "request body holds more than one JSON value")
		}
		return s.decodeError(err)
	}
	return nil
}

// tooLarge is the 413 for a body over limit bytes.
func tooLarge(limit int64) error {
	return &httpError{status: http.StatusRequestEntityTooLarge,
		msg: fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
}

func (s *Server) decodeError(err error) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	case errors.Is(err, io.EOF):
		return badRequest("", "request body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "request body is truncated JSON")
	case errors.As(err, &se):
		return badRequest("", "invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return badRequest(field, "expected %s, got JSON %s", te.Type, te.Value)
	}
	// encoding/json reports unknown fields only as a formatted error
	// ("json: unknown field \"x\""); it has no type to branch on.
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return badRequest(f, "unknown field")
	}
	return badRequest("", "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// ValidateID checks an ID taken from a path, query or body with the rule
// the state store applies (structs.ValidateID), so a bad ID is refused
// (400, naming the field) before any backend work.
func ValidateID(field, id string) error { return structs.ValidateID(field, id) }

// pathID reads and validates the {id} path value.
func pathID(r *http.Request, field string) (string, error) {
	id := r.PathValue("id")
	return id, ValidateID(field, id)
}

// namespace reads ?namespace=, defaulting to "default".
func namespace(r *http.Request) (string, error) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		return DefaultNamespace, nil
	}
	return ns, ValidateID("namespace", ns)
}

// queryBool reads a boolean query parameter ("" is false).
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(name, "not a boolean: %q", v)
	}
	return b, nil
}

// blockingParams reads ?index=N&wait=D. wait defaults to DefaultWait and is
// capped at MaxWait; it only matters when index > 0, and an explicit 0
// means "answer now" (read).
func blockingParams(r *http.Request) (uint64, time.Duration, error) {
	q := r.URL.Query()
	var index uint64
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, badRequest("index", "not an unsigned integer: %q", v)
		}
		index = n
	}
	wait := DefaultWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			// A unit is required, so "5" is refused rather than read as 5ns.
			return 0, 0, badRequest("wait", "not a duration (e.g. 30s, 5m): %q", v)
		}
		if d < 0 {
			return 0, 0, badRequest("wait", "must not be negative: %q", v)
		}
		wait = min(d, MaxWait)
	}
	return index, wait, nil
}

// setIndex sets the index header; never 0, so a client passing it back
// always blocks (Nomad does the same).
// setWarnings adds one HTTP Warning header (RFC 9111 section 5.5, code
// 299 "miscellaneous persistent warning", as Kubernetes answers API
// warnings) per message: the request succeeded, but the operator should
// know. Clients show them (host/api/client OnWarning).
func setWarnings(w http.ResponseWriter, msgs []string) {
	for _, m := range msgs {
		w.Header().Add("Warning", "299 volhost "+strconv.Quote(m))
	}
}

func setIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(IndexHeader, strconv.FormatUint(max(index, 1), 10))
}

// StatusClientClosedRequest is the status of a request whose client went
// away before the answer (nginx's 499): the server did not fail, nobody
// reads the answer, and the access log must not call it an error.
const StatusClientClosedRequest = 499

// statusRecorder remembers the status for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	// gone, when set, reports that the client went away: a 5xx written
	// after that (the handler's context was cancelled under it, e.g. a
	// long poll closed by a page change) is recorded and sent as 499.
	gone func() bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if code >= http.StatusInternalServerError && s.gone != nil && s.gone() {
		code = StatusClientClosedRequest
	}
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush lets streaming handlers (none yet) flush through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// wrap adds JSON answers for unknown routes and wrong methods, panic
// recovery and a debug access log.
func (s *Server) wrap(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The request's context ends when its client goes away or the
		// server shuts down (s.base); only the first is the client's doing.
		gone := func() bool { return r.Context().Err() != nil && s.base.Err() == nil }
		rec := &statusRecorder{ResponseWriter: w, gone: gone}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", p)
				if rec.status == 0 {
					WriteError(rec, fmt.Errorf("internal error: %v", p))
				}
			}
			switch {
			case rec.status == StatusClientClosedRequest:
				s.log.Debug("client went away before the answer", "method", r.Method, "path", r.URL.Path,
					"status", rec.status, "duration", time.Since(start))
			case rec.status >= http.StatusInternalServerError:
				s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path,
					"status", rec.status, "duration", time.Since(start))
			default:
				s.log.Debug("request", "method", r.Method, "path", r.URL.Path,
					"status", rec.status, "duration", time.Since(start))
			}
		}()
		if _, pattern := mux.Handler(r); pattern == "" {
			s.noRoute(rec, r, mux)
			return
		}
		mux.ServeHTTP(rec, r)
	})
}

// noRoute answers 404 or 405 as JSON: the mux's own answers are plain text.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	h, _ := mux.Handler(r)
	probe := &probeWriter{header: http.Header{}}
	h.ServeHTTP(probe, r)
	code := probe.status
	if code == 0 {
		code = http.StatusNotFound
	}
	if allow := probe.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	msg := fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)
	if code == http.StatusMethodNotAllowed {
		msg = fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, probe.header.Get("Allow"))
	}
	WriteJSON(w, code, ErrorResponse{Error: msg})
}

// probeWriter captures what the mux's fallback handler would answer.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header { return p.header }
func (p *probeWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *probeWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
