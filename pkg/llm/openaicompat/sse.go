package openaicompat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxEventSize bounds one server-sent event.
const maxEventSize = 16 << 20

// errDone is returned by [sseReader.next] at "data: [DONE]".
var errDone = errors.New("[DONE]")

// errCut is returned by [sseReader.next] when the body ended in the middle
// of a line: the connection was cut.
var errCut = errors.New("body ended in the middle of an event")

// sseReader reads the data of server-sent events. It follows the SSE
// format (comments and unknown fields skipped, in any number; a multi-line
// data field joined with newlines) and tolerates servers that separate
// events by a single newline: a data line that follows a line holding a
// whole JSON value starts a new event.
type sseReader struct {
	r    *bufio.Reader
	data []byte
	has  bool
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the data of the next event, [errDone] at "[DONE]", io.EOF
// at a clean end of the body, [errCut] for a partial last line, or the
// read error.
func (s *sseReader) next() ([]byte, error) {
	for {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(buf) <= maxEventSize {
				line, err = s.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			if len(buf) > maxEventSize {
				return nil, fmt.Errorf("event larger than %d bytes", maxEventSize)
			}
			line = buf
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if err != nil { // io.EOF
			last := bytes.TrimSpace(line)
			if len(last) == 0 {
				if s.has {
					return s.dispatch()
				}
				return nil, io.EOF
			}
			// A last line without its newline is whole only if it is a
			// data field holding a whole value; else the body was cut.
			field, value, _ := bytes.Cut(last, []byte(":"))
			value = bytes.TrimSpace(value)
			if string(field) != "data" || (string(value) != "[DONE]" && !json.Valid(value)) {
				return nil, errCut
			}
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if s.has {
				return s.dispatch()
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // event:, id:, retry: or unknown
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if s.has && json.Valid(s.data) {
			// No blank line after the previous event: it ended at its
			// line's end.
			out := s.take()
			s.data, s.has = append(s.data, value...), true
			return s.check(out)
		}
		if s.has {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.has = true
		if len(s.data) > maxEventSize {
			return nil, fmt.Errorf("event larger than %d bytes", maxEventSize)
		}
	}
}

func (s *sseReader) take() []byte {
	out := append([]byte(nil), s.data...)
	s.data, s.has = s.data[:0], false
	return out
}

func (s *sseReader) dispatch() ([]byte, error) { return s.check(s.take()) }

func (s *sseReader) check(data []byte) ([]byte, error) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		return nil, errDone
	}
	return data, nil
}
