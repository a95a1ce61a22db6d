package api

import "net/http"

// The write routes' bodies are checked here, one rule per shape, so that
// every register route refuses a missing object, a bad ID, an empty list
// or a null entry with the same 400 before the backend sees it.

// decodeOne decodes the body of a PUT registering one object (a node, a
// plugin): 400 "<field>: missing" when the object is absent, and the
// ValidateID error of "<field>.id" when its ID is not well formed.
func decodeOne[Req, T any](s *Server, w http.ResponseWriter, r *http.Request, field string,
	obj func(*Req) *T, id func(*T) string) (*T, error) {
	var req Req
	if err := s.decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	o := obj(&req)
	if o == nil {
		return nil, badRequest(field, "missing")
	}
	if err := ValidateID(field+".id", id(o)); err != nil {
		return nil, err
	}
	return o, nil
}

// decodeList decodes the body of a PUT writing a list (volumes,
// allocations): 400 "<field>: no <noun> given" when it is empty and
// "<field>: entry N is null" at the first null entry; each entry is then
// passed to check in order, whose error refuses the request.
func decodeList[Req, T any](s *Server, w http.ResponseWriter, r *http.Request, field, noun string,
	list func(*Req) []*T, check func(*T) error) ([]*T, error) {
	var req Req
	if err := s.decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	items := list(&req)
	if len(items) == 0 {
		return nil, badRequest(field, "no %s given", noun)
	}
	for i, it := range items {
		if it == nil {
			return nil, badRequest(field, "entry %d is null", i)
		}
		if err := check(it); err != nil {
			return nil, err
		}
	}
	return items, nil
}
