package web

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
)

// maxBody bounds every request's body: the API's JSON and the pages'
// forms.
const maxBody = 1 << 20

// readBody reads r's body within maxBody before anything parses it, so
// that no handler reads a body of its own: a page's POST is a form,
// urlencoded only (415 for any other type, multipart included: nothing
// is ever written to disk), parsed once here into r.PostForm; any other
// body is read whole into memory for its handler to decode. A body over
// the bound is 413.
func readBody(w http.ResponseWriter, r *http.Request, f face) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if f == page && r.Method == http.MethodPost {
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
			return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "A form is sent urlencoded (application/x-www-form-urlencoded).")
		}
		if err := r.ParseForm(); err != nil {
			return bodyError(err)
		}
		return nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// bodyError is the answer to err of reading a body: 413 over the bound,
// else 400.
func bodyError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "The body is over %d bytes.", maxBody)
	}
	return badRequest("The body cannot be read: %s", err.Error())
}
