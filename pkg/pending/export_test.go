package pending

// Keeps reports whether f selects c.
func (f Filter) Keeps(c Call) bool { return f.keeps(c) }
