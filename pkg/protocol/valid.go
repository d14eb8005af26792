package protocol

// This file holds validJSON, which answers what json.Valid answers for
// every input, in one tight loop: json.Valid drives encoding/json's
// scanner, one indirect call per byte, and was the largest single cost of
// decoding a task or a result.

// maxNestingDepth is encoding/json's limit on nested arrays and objects.
const maxNestingDepth = 10000

// validJSON reports whether data is one valid JSON value, surrounded by
// optional whitespace: exactly what json.Valid reports (FuzzValidJSON
// compares them). Like encoding/json, it checks the grammar of RFC 8259,
// not the UTF-8 of strings, and refuses nesting deeper than 10000.
func validJSON(data []byte) bool {
	// stack holds, per open container, '{' or '['; an object whose member
	// name is still expected is told apart by state.
	var buf [32]byte
	stack := buf[:0]
	i := skipSpace(data, 0)
	for {
		// A value starts at i.
		if i >= len(data) {
			return false
		}
		switch c := data[i]; c {
		case '{', '[':
			if len(stack) == maxNestingDepth {
				return false
			}
			stack = append(stack, c)
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' or ']': empty
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var ok bool
				if i, ok = memberStart(data, i); !ok {
					return false
				}
			}
			continue
		case '"':
			var ok bool
			if i, ok = validString(data, i); !ok {
				return false
			}
		case 't':
			if !hasLiteral(data, i, "true") {
				return false
			}
			i += 4
		case 'f':
			if !hasLiteral(data, i, "false") {
				return false
			}
			i += 5
		case 'n':
			if !hasLiteral(data, i, "null") {
				return false
			}
			i += 4
		default:
			var ok bool
			if i, ok = validNumber(data, i); !ok {
				return false
			}
		}
		// A value ended at i: close containers, or go on to the next
		// element or member.
		for {
			i = skipSpace(data, i)
			if len(stack) == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			top := stack[len(stack)-1]
			if data[i] == top+2 { // '}' or ']'
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return false
			}
			i = skipSpace(data, i+1)
			if top == '{' {
				var ok bool
				if i, ok = memberStart(data, i); !ok {
					return false
				}
			}
			break
		}
	}
}

// memberStart checks a member's name and colon at i and returns the index
// of its value, past any whitespace.
func memberStart(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	i, ok := validString(data, i)
	if !ok {
		return 0, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return 0, false
	}
	return skipSpace(data, i+1), true
}

// validString checks the string starting at i (at its opening quote) and
// returns the index just past it.
func validString(data []byte, i int) (int, bool) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			i++
			if i >= len(data) {
				return 0, false
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return 0, false
				}
				for _, h := range data[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// validNumber checks the number starting at i and returns the index just
// past it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		i++
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		i++
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		i++
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	return i, true
}

// hasLiteral reports whether data holds lit at i.
func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}
