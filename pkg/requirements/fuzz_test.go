package requirements

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// FuzzParse checks, for any expression and any host values, that parsing neither panics nor
// varies between calls, that what it accepts keeps the text as written, and that Eval and
// Check on an accepted expression neither panic nor blame the expression for host values; no
// message is longer than maxMessage.
func FuzzParse(f *testing.F) {
	seeds := []struct{ expr, cuda, driver, arch, brand string }{
		{realCUDA, "12.4", "550.54.15", "9.0", "nvidia"},
		{realCUDA, "12.2", "470.82.01", "8.0", "tesla"},
		{"cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=geforce,driver>=470,driver<471", "12.2", "470.1", "7.5", "geforce"},
		{"cuda>=11.8 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471", "11.4", "470.57.02", "8.6", "quadro"},
		{"cuda>=12.8 brand=unknown,driver>=470,driver<471", "13.0", "580.159.04", "10.0", "unknown"},
		{"cuda>=12.0", "", "", "", ""},
		{"arch>=8.0,brand!=GeForce", "12.4", "550.54.15", "9.0", "GEFORCE"},
		{"driver>=580.159.04", "13.0", "580.159.4", "12.0", "nvidia"},
		{"  cuda>=99 \t cuda=12 ", "12.0.0", "1", "1", "x"},
		{"foo>=1,bar=2", "12.4", "N/A", "9.0", "tesla"},
		{"cuda>>12 cuda=>1 cuda!1 >=1 brand>=x driver>=1, ,a=1 a=1,,b=2", "a.b", "1..2", ".", "\x00"},
		{"", "12.4", "550", "9.0", "nvidia"},
		{"cuda>=99999999999999999999999.0001", "99999999999999999999999.1", "0", "0", ""},
	}
	for _, s := range seeds {
		f.Add(s.expr, s.cuda, s.driver, s.arch, s.brand)
	}
	f.Fuzz(func(t *testing.T, expr, cuda, driver, arch, brand string) {
		e, err := parseExpr(expr)
		e2, err2 := parseExpr(expr)
		if !reflect.DeepEqual(e, e2) || errText(err) != errText(err2) {
			t.Fatalf("parseExpr(%q) not deterministic: %+v, %v then %+v, %v", expr, e, err, e2, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parseExpr(%q) error %v does not wrap ErrMalformed", expr, err)
			}
			if !strings.Contains(err.Error(), quote.Value(expr)) {
				t.Fatalf("parseExpr(%q) error %q does not name the expression", expr, err)
			}
			if len(err.Error()) > maxMessage {
				t.Fatalf("parseExpr(%q): error of %d bytes", expr, len(err.Error()))
			}
			return
		}
		checkShape(t, expr, e)

		gpu := GPU{ID: "0", Arch: arch, Brand: brand}
		h := Host{CUDA: cuda, Driver: driver, GPUs: []GPU{gpu}}
		ok, err := e.Eval(h)
		if err != nil && (!errors.Is(err, ErrInvalidVersion) || errors.Is(err, ErrMalformed)) {
			t.Fatalf("parseExpr(%q).Eval(%+v) error %v: want ErrInvalidVersion, never ErrMalformed", expr, h, err)
		}
		// A GPU repeated has the same facts: the per-GPU rule must give the same answer.
		twice := Host{CUDA: cuda, Driver: driver, GPUs: []GPU{gpu, {ID: "1", Arch: arch, Brand: brand}}}
		ok2, err2 := e.Eval(twice)
		if ok2 != ok || errText(err2) != errText(err) {
			t.Fatalf("parseExpr(%q): Eval with one GPU = %v, %v; with the same GPU twice = %v, %v", expr, ok, err, ok2, err2)
		}
		if _, err := e.Eval(Host{CUDA: cuda, Driver: driver}); err != nil && !errors.Is(err, ErrInvalidVersion) {
			t.Fatalf("parseExpr(%q).Eval without GPUs: %v", expr, err)
		}

		warnings, cerr := Check([]Requirement{{Name: "NVIDIA_REQUIRE_FUZZ", Expression: expr}}, h)
		for _, m := range append(warnings, errText(cerr)) {
			if len(m) > maxMessage {
				t.Fatalf("Check(%q): a message of %d bytes", expr, len(m))
			}
		}
		switch {
		case err != nil:
			if !errors.Is(cerr, ErrInvalidVersion) {
				t.Fatalf("Check(%q) error %v, want ErrInvalidVersion like Eval's %v", expr, cerr, err)
			}
		case ok:
			if cerr != nil {
				t.Fatalf("Check(%q) error %v, but Eval is satisfied", expr, cerr)
			}
		default:
			if !errors.Is(cerr, ErrUnsatisfied) {
				t.Fatalf("Check(%q) error %v, want ErrUnsatisfied", expr, cerr)
			}
			msg := cerr.Error()
			if !strings.HasPrefix(msg, "unsatisfied condition: "+quote.Cut(e.Terms[0].Raw)) || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("Check(%q) message %q: want one line starting with the first term (cut)", expr, msg)
			}
		}
	})
}

// checkShape asserts that a parsed expression keeps the text as written: its terms are the
// whitespace-separated fields, each the comma-join of its factors, each key+op+value.
func checkShape(t *testing.T, expr string, e Expression) {
	t.Helper()
	fields := strings.Fields(expr)
	if e.Raw != expr || len(e.Terms) != len(fields) {
		t.Fatalf("parseExpr(%q) = %+v: want Raw as given and %d terms", expr, e, len(fields))
	}
	for i, term := range e.Terms {
		raws := make([]string, len(term.Factors))
		for j, f := range term.Factors {
			if f.Raw != f.Key+string(f.Op)+f.Value || f.Key == "" || f.Value == "" {
				t.Fatalf("parseExpr(%q) factor %+v: want non-empty key and value making up Raw", expr, f)
			}
			raws[j] = f.Raw
		}
		if term.Raw != fields[i] || strings.Join(raws, ",") != term.Raw {
			t.Fatalf("parseExpr(%q) term %d = %+v, want the field %q", expr, i, term, fields[i])
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
