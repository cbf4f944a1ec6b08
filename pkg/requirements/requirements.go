// Package requirements parses and evaluates NVIDIA_REQUIRE_* expressions, the
// conditions a CUDA image places on the host driver and GPUs, such as
// "cuda>=12.4 brand=tesla,driver>=535,driver<536". It is pure: it reads only the values it is
// given and never touches the host.
//
// Grammar. An expression is split on runs of white space (any Unicode space, as strings.Fields)
// into OR-terms, and each OR-term on "," into AND-factors, so AND binds tighter: the example
// reads cuda>=12.4 || (brand=tesla && driver>=535 && driver<536). A factor is
// <key><op><value> with op one of = != < <= > >=. The operator is the whole run of the
// characters "<>=!" after the key, so "cuda>>12" and "cuda=>12" are malformed rather than
// read as a stray character in the value. Keys:
//
//   - cuda: the CUDA version the host driver supports (e.g. 12.4);
//   - driver: the driver version (e.g. 580.159.04);
//   - arch: the compute capability of each selected GPU (e.g. 9.0);
//   - brand: the brand of each selected GPU (tesla, nvidia, geforce, quadro, titan, unknown…);
//     only = and != apply, compared case-insensitively.
//
// Versions compare numerically by dot components (CompareVersions). Keys are case-sensitive:
// "CUDA>=12" has an unknown key. An arch or brand factor holds only if it holds for every
// selected GPU (so with none selected). An empty or white-space expression is satisfied.
//
// Guarantees and decisions:
//
//   - Malformed input (empty factor, missing key, operator or value, an unknown operator,
//     operator characters in the value, a bad version, brand with an ordering operator, a
//     non-printable character) is an error wrapping ErrMalformed that names the expression and
//     the term or factor; Check also names the variable. Expression text always appears quoted
//     in errors and warnings, each value cut to 256 bytes (internal/quote), and only printable
//     text reaches the unsatisfied message.
//   - An unknown key (NVIDIA_REQUIRE_FOO=foo>=1) is not an error: NVIDIA silently skips such
//     factors, and refusing them would refuse images NVIDIA runs. The factor, still
//     well-formed, counts as satisfied; unlike NVIDIA, Check warns, naming the variable, the
//     expression, the key and the known keys.
//   - A host value the evaluation needs but cannot parse (an empty driver version, say) is an
//     error wrapping ErrInvalidVersion and never ErrMalformed: the image is not at fault.
//   - Check's unsatisfied error starts verbatim as NVIDIA's: "unsatisfied condition: <first
//     OR-term as written>" (cut past 256 bytes, its length said), plus ", please update your
//     driver to a newer version, or use an earlier cuda container" when that term starts with
//     "cuda>=". Then, on the same line, what the host has: " (host: cuda 12.4, driver
//     550.54.15; GPU 0: arch 8.0, brand tesla; GPUs 1,2: arch 9.0, brand nvidia)", the GPUs
//     only when the expression has an arch or brand factor, those with the same facts sharing
//     an entry. An empty host value shows as "unknown", one with spaces or non-printable
//     characters quoted.
//   - Check parses every requirement before evaluating any, so a malformed one is reported
//     even when an earlier one is unsatisfied.
package requirements

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

var (
	// ErrUnsatisfied marks a well-formed requirement the host does not meet.
	ErrUnsatisfied = errors.New("unsatisfied requirement")
	// ErrMalformed marks a requirement expression that does not follow the grammar.
	ErrMalformed = errors.New("malformed requirement")
	// ErrInvalidVersion marks a version that is not a dotted list of decimal numbers, in an
	// expression (then ErrMalformed is wrapped too), in a host value or given to CompareVersions.
	ErrInvalidVersion = errors.New("invalid version")
)

// Keys of a factor.
const (
	KeyCUDA   = "cuda"
	KeyDriver = "driver"
	KeyArch   = "arch"
	KeyBrand  = "brand"
)

// knownKeys lists the keys this package evaluates, sorted, as shown in warnings.
var knownKeys = []string{KeyArch, KeyBrand, KeyCUDA, KeyDriver}

// Op is a comparison operator of a factor.
type Op string

// The operators of the grammar.
const (
	OpEqual        Op = "="
	OpNotEqual     Op = "!="
	OpLess         Op = "<"
	OpLessEqual    Op = "<="
	OpGreater      Op = ">"
	OpGreaterEqual Op = ">="
)

// holds gives, for each operator, whether a comparison of the host's version with the
// factor's (-1, 0 or +1, as Version.Compare returns) satisfies it; opChars are their characters.
var holds = map[Op]func(c int) bool{
	OpEqual:        func(c int) bool { return c == 0 },
	OpNotEqual:     func(c int) bool { return c != 0 },
	OpLess:         func(c int) bool { return c < 0 },
	OpLessEqual:    func(c int) bool { return c <= 0 },
	OpGreater:      func(c int) bool { return c > 0 },
	OpGreaterEqual: func(c int) bool { return c >= 0 },
}

const opChars = "<>=!"

// GPU is what the requirements know of one selected device: a whole GPU or a MIG device,
// whose arch and brand are its parent's.
type GPU struct {
	ID    string // as shown in messages: the device's index, "0" or "0:1"
	Arch  string // compute capability, e.g. "9.0"
	Brand string // e.g. "tesla"; compared case-insensitively
}

// Host is what the requirements are evaluated against.
type Host struct {
	CUDA   string // CUDA version the driver supports, e.g. "12.4"
	Driver string // driver version, e.g. "550.54.15"
	GPUs   []GPU  // the GPUs selected for the container only
}

// Requirement is one requirement variable, e.g. {"NVIDIA_REQUIRE_CUDA", "cuda>=12.0 brand=tesla"}.
type Requirement struct {
	Name       string
	Expression string
}

// Expression is a parsed requirement: satisfied when any of its Terms is.
type Expression struct {
	Raw   string // the expression as written
	Terms []Term
}

// Term is one OR-term: satisfied when all of its Factors are.
type Term struct {
	Raw     string // the term as written, e.g. "brand=tesla,driver>=535"
	Factors []Factor
}

// Factor is one <key><op><value> comparison.
type Factor struct {
	Raw   string // the factor as written, e.g. "driver>=535"
	Key   string
	Op    Op
	Value string
}

// Known reports whether f's key is one this package evaluates; factors with other keys are
// satisfied.
func (f Factor) Known() bool { return slices.Contains(knownKeys, f.Key) }

// Limits on one expression. The image chooses it, and the prestart check runs in the
// engine's process tree: without them a 126 KB expression of 18,000 factors cost gigabytes.
// Real ones (a CUDA 12 image's NVIDIA_REQUIRE_CUDA) are under 2 KB and 100 factors.
const (
	MaxExpressionLength = 16 << 10
	MaxFactors          = 1024
)

// parse parses a requirement expression. An error says why it is malformed without naming the
// expression, so that Check names it (and its variable) once. Its work is linear in the expression's length.
func parse(expr string) (Expression, error) {
	if len(expr) > MaxExpressionLength {
		return Expression{}, fmt.Errorf("%d bytes long, more than the %d allowed", len(expr), MaxExpressionLength)
	}
	e := Expression{Raw: expr}
	factors := 0
	for _, raw := range strings.Fields(expr) {
		t := Term{Raw: raw}
		for _, fraw := range strings.Split(raw, ",") {
			if factors++; factors > MaxFactors {
				return Expression{}, fmt.Errorf("more than %d factors", MaxFactors)
			}
			if fraw == "" {
				return Expression{}, fmt.Errorf("term %s: empty factor", quote.Value(raw))
			}
			f, err := parseFactor(fraw)
			if err != nil {
				return Expression{}, fmt.Errorf("factor %s: %w", quote.Value(fraw), err)
			}
			t.Factors = append(t.Factors, f)
		}
		e.Terms = append(e.Terms, t)
	}
	return e, nil
}

func parseFactor(raw string) (Factor, error) {
	if !printable(raw) {
		return Factor{}, errors.New("contains a non-printable character")
	}
	start := strings.IndexAny(raw, opChars)
	if start < 0 {
		return Factor{}, errors.New("missing operator (one of = != < <= > >=)")
	}
	if start == 0 {
		return Factor{}, errors.New("missing key before the operator")
	}
	value := strings.TrimLeft(raw[start:], opChars)
	f := Factor{Raw: raw, Key: raw[:start], Op: Op(raw[start : len(raw)-len(value)]), Value: value}
	if holds[f.Op] == nil {
		return Factor{}, fmt.Errorf("unknown operator %s (want one of = != < <= > >=)", quote.Value(string(f.Op)))
	}
	if f.Value == "" {
		return Factor{}, errors.New("missing value after the operator")
	}
	if strings.ContainsAny(f.Value, opChars) {
		return Factor{}, fmt.Errorf("value %s contains an operator character", quote.Value(f.Value))
	}
	if err := f.check(); err != nil {
		return Factor{}, err
	}
	return f, nil
}

// check validates the value and operator of a factor against its key.
func (f Factor) check() error {
	switch f.Key {
	case KeyCUDA, KeyDriver, KeyArch:
		if holds[f.Op] == nil {
			return fmt.Errorf("unknown operator %s (want one of = != < <= > >=)", quote.Value(string(f.Op)))
		}
		_, err := ParseVersion(f.Value)
		return err
	case KeyBrand:
		if f.Op != OpEqual && f.Op != OpNotEqual {
			return fmt.Errorf("operator %s does not apply to brand (want = or !=)", quote.Value(string(f.Op)))
		}
		if f.Value == "" {
			return errors.New("missing value after the operator")
		}
	}
	return nil
}

// UnknownKeys returns the factors of e whose key this package does not evaluate, in order.
func (e Expression) UnknownKeys() []Factor {
	return e.factors(func(f Factor) bool { return !f.Known() })
}

// factors returns the factors of e that keep accepts, in order.
func (e Expression) factors(keep func(Factor) bool) []Factor {
	var out []Factor
	for _, t := range e.Terms {
		for _, f := range t.Factors {
			if keep(f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// Eval reports whether h satisfies e: some term has every factor satisfied. An expression
// without terms is satisfied. Terms are evaluated in order and the first satisfied one ends
// the evaluation. An error means a host value a factor needs is not a version (wrapping
// ErrInvalidVersion), or a Factor built by hand is invalid (wrapping ErrMalformed).
func (e Expression) Eval(h Host) (bool, error) {
	if len(e.Terms) == 0 {
		return true, nil
	}
terms:
	for _, t := range e.Terms {
		for _, f := range t.Factors {
			ok, err := f.eval(h)
			if err != nil {
				return false, fmt.Errorf("evaluate %s: %w", quote.Value(t.Raw), err)
			}
			if !ok {
				continue terms
			}
		}
		return true, nil
	}
	return false, nil
}

func (f Factor) eval(h Host) (bool, error) {
	if err := f.check(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch f.Key {
	case KeyCUDA:
		return f.compare(h.CUDA, "host cuda version")
	case KeyDriver:
		return f.compare(h.Driver, "host driver version")
	case KeyArch:
		for _, g := range h.GPUs {
			ok, err := f.compare(g.Arch, "arch of GPU "+g.ID)
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case KeyBrand:
		for _, g := range h.GPUs {
			if strings.EqualFold(g.Brand, f.Value) != (f.Op == OpEqual) {
				return false, nil
			}
		}
		return true, nil
	}
	return true, nil // unknown key: satisfied, as NVIDIA does
}

// compare compares the host value have against f's version; what names have in errors.
func (f Factor) compare(have, what string) (bool, error) {
	hv, err := ParseVersion(have)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	want, err := ParseVersion(f.Value)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return holds[f.Op](hv.Compare(want)), nil // a known operator: eval checked the factor
}

// Check evaluates every requirement against h; all must hold. All are parsed first (the first
// malformed one is the error), then evaluated in order: the first unsatisfied one is an error
// wrapping ErrUnsatisfied whose text the package documentation describes. The warnings,
// returned with or without an error, name the factors with unknown keys of every requirement
// parsed.
func Check(reqs []Requirement, h Host) (warnings []string, err error) {
	exprs := make([]Expression, len(reqs))
	for i, r := range reqs {
		if exprs[i], err = parse(r.Expression); err != nil {
			return warnings, fmt.Errorf("%w %s: %w", ErrMalformed, label(r), err)
		}
		if w := unknownKeysWarning(r, exprs[i].UnknownKeys()); w != "" {
			warnings = append(warnings, w)
		}
	}
	for i, e := range exprs {
		ok, err := e.Eval(h)
		if err != nil {
			return warnings, fmt.Errorf("check %s: %w", label(reqs[i]), err)
		}
		if !ok {
			return warnings, quote.Marked(ErrUnsatisfied, "%s", unsatisfiedMessage(e, h))
		}
	}
	return warnings, nil
}

// unknownKeysWarning is the one warning for a requirement's factors with unknown keys (""
// for none), naming at most a few distinct keys.
func unknownKeysWarning(r Requirement, unknown []Factor) string {
	if len(unknown) == 0 {
		return ""
	}
	var keys []string
	for _, f := range unknown {
		if !slices.Contains(keys, f.Key) {
			keys = append(keys, f.Key)
		}
	}
	known := " (known keys: " + strings.Join(knownKeys, ", ") + "); treated as satisfied"
	if len(unknown) == 1 {
		return fmt.Sprintf("%s: unknown key %s in factor %s%s", label(r), quote.List(keys), quote.Value(unknown[0].Raw), known)
	}
	noun := "key"
	if len(keys) > 1 {
		noun = "keys"
	}
	return fmt.Sprintf("%s: unknown %s %s in %d factors, the first %s%s", label(r), noun, quote.List(keys), len(unknown), quote.Value(unknown[0].Raw), known)
}

// label names a requirement in errors: NVIDIA_REQUIRE_CUDA="cuda>=12.0". A long expression
// is cut, with its length said.
func label(r Requirement) string {
	if r.Name == "" {
		return quote.Value(r.Expression)
	}
	return quote.Var(show(r.Name), r.Expression)
}

// unsatisfiedMessage builds the one-line message for an unsatisfied expression; e has at least
// one term, since an expression without terms is satisfied.
func unsatisfiedMessage(e Expression, h Host) string {
	var b strings.Builder
	first := e.Terms[0].Raw
	b.WriteString("unsatisfied condition: " + quote.Cut(first)) // as NVIDIA writes it, unquoted; a long term cut
	if strings.HasPrefix(first, "cuda>=") {
		b.WriteString(", please update your driver to a newer version, or use an earlier cuda container")
	}
	fmt.Fprintf(&b, " (host: cuda %s, driver %s", orUnknown(h.CUDA), orUnknown(h.Driver))
	if len(e.factors(func(f Factor) bool { return f.Key == KeyArch || f.Key == KeyBrand })) > 0 { // facts of the GPUs
		for _, g := range groupGPUs(h.GPUs) {
			b.WriteString("; " + g)
		}
	}
	b.WriteString(")")
	return b.String()
}

// groupGPUs describes each GPU's facts, GPUs with the same facts sharing an entry, in order of
// first appearance: "GPU 0: arch 8.0, brand tesla", "GPUs 1,2: arch 9.0, brand nvidia".
func groupGPUs(gpus []GPU) []string {
	var facts []string
	indices := map[string][]string{}
	for _, g := range gpus {
		f := fmt.Sprintf("arch %s, brand %s", orUnknown(g.Arch), orUnknown(g.Brand))
		if _, seen := indices[f]; !seen {
			facts = append(facts, f)
		}
		indices[f] = append(indices[f], g.ID)
	}
	out := make([]string, 0, len(facts))
	for _, f := range facts {
		noun := "GPU"
		if len(indices[f]) > 1 {
			noun = "GPUs"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", noun, strings.Join(indices[f], ","), f))
	}
	return out
}

// orUnknown shows a host value in a message: "unknown" when empty, quoted when it holds
// anything but printable characters, so that the message stays one line.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return show(s)
}

// show returns s, quoted when it holds anything but printable characters, and cut
// (internal/quote): a host value or variable name of kilobytes stays a short message.
func show(s string) string {
	if printable(s) && !strings.ContainsFunc(s, unicode.IsSpace) {
		return quote.Cut(s)
	}
	return quote.Value(s)
}

// printable reports whether s is valid UTF-8 made of printable characters only.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
