package resp

// Match reports whether s matches the glob-style pattern as Redis's KEYS
// and SCAN MATCH do (util.c stringmatchlen, case-sensitive): '*' matches
// any run of bytes, '?' one byte, "[abc]", "[^abc]" and "[a-z]" a byte in
// (or not in) a set, and '\' escapes the next byte.
func Match(pattern, s []byte) bool {
	if len(pattern) == 1 && pattern[0] == '*' {
		return true // KEYS * and SCAN without MATCH list the empty key too
	}
	skip := false
	return match(pattern, s, &skip, 0)
}

// maxNesting bounds the recursion of '*' (Redis bounds it too), so that a
// pattern of many stars costs no more than a bounded amount of work per
// star.
const maxNesting = 1000

// skipLonger is Redis's skipLongerMatches: once a '*' has tried every
// suffix of s without a match, no outer '*' can match by consuming more.
func match(p, s []byte, skipLonger *bool, nesting int) bool {
	if nesting > maxNesting {
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if match(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			matched := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					p = p[1:]
					if p[0] == s[0] {
						matched = true
					}
				} else if len(p) == 0 {
					break // unterminated: like Redis, treat the end as ']'
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi := p[0], p[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					if s[0] >= lo && s[0] <= hi {
						matched = true
					}
					p = p[2:]
				} else if p[0] == s[0] {
					matched = true
				}
				p = p[1:]
			}
			if len(p) == 0 {
				// Redis steps back onto the last byte so that the loop's
				// increment ends the pattern.
				p = []byte{']'}
			}
			if not {
				matched = !matched
			}
			if !matched {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}

// LiteralPrefix returns the bytes every string matching pattern starts with
// (the pattern up to its first special byte), so a KEYS scan can start
// there.
func LiteralPrefix(pattern []byte) []byte {
	for i, c := range pattern {
		switch c {
		case '*', '?', '[', '\\':
			return pattern[:i]
		}
	}
	return pattern
}
