package requirements

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// realCUDA is NVIDIA_REQUIRE_CUDA as shipped by a CUDA 12.4 base image.
const realCUDA = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 " +
	"brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471"

func host(cuda, driver string, gpus ...GPU) Host {
	return Host{CUDA: cuda, Driver: driver, GPUs: gpus}
}

var (
	h100    = GPU{ID: "0", Arch: "9.0", Brand: "nvidia"}
	a100    = GPU{ID: "0", Arch: "8.0", Brand: "tesla"}
	defHost = host("12.4", "550.54.15", h100)
)

// outcome is what evaluating one expression yields.
type outcome int

const (
	pass outcome = iota
	fail
	malformed
	hostError
)

func (o outcome) String() string {
	return [...]string{"pass", "fail", "malformed", "host error"}[o]
}

func TestEval(t *testing.T) {
	twoArch := host("12.4", "550.54.15", GPU{ID: "0", Arch: "8.0", Brand: "tesla"}, GPU{ID: "1", Arch: "9.0", Brand: "tesla"})
	twoBrand := host("12.4", "550.54.15", GPU{ID: "0", Arch: "9.0", Brand: "tesla"}, GPU{ID: "1", Arch: "9.0", Brand: "geforce"})
	noGPU := host("12.4", "550.54.15")
	oldDriver := host("12.2", "535.104.05", a100)
	testCases := []struct {
		description string
		expr        string
		host        Host
		want        outcome
		wantUnknown []string // keys of factors with unknown keys, in order
	}{
		// cuda, every operator.
		{description: "cuda >= equal", expr: "cuda>=12.4", host: defHost, want: pass},
		{description: "cuda >= higher fails", expr: "cuda>=12.5", host: defHost, want: fail},
		{description: "cuda > lower", expr: "cuda>12.3", host: defHost, want: pass},
		{description: "cuda > equal fails", expr: "cuda>12.4", host: defHost, want: fail},
		{description: "cuda <= equal", expr: "cuda<=12.4", host: defHost, want: pass},
		{description: "cuda < equal fails", expr: "cuda<12.4", host: defHost, want: fail},
		{description: "cuda < major", expr: "cuda<13", host: defHost, want: pass},
		{description: "cuda = equal", expr: "cuda=12.4", host: defHost, want: pass},
		{description: "cuda = other fails", expr: "cuda=12.3", host: defHost, want: fail},
		{description: "cuda != equal fails", expr: "cuda!=12.4", host: defHost, want: fail},
		{description: "cuda != other", expr: "cuda!=11.8", host: defHost, want: pass},
		{description: "cuda numeric not lexical", expr: "cuda>=12.10", host: defHost, want: fail},
		// trailing zeros.
		{description: "trailing zero in the expression", expr: "cuda>=12.4.0", host: defHost, want: pass},
		{description: "cuda=12 matches host 12.0", expr: "cuda=12", host: host("12.0", "525.60.13"), want: pass},
		{description: "cuda=12.0.0 matches host 12", expr: "cuda=12.0.0", host: host("12", "525.60.13"), want: pass},
		{description: "cuda<12.0.0 against host 12 fails", expr: "cuda<12.0.0", host: host("12", "525.60.13"), want: fail},
		// driver, every operator, leading zeros.
		{description: "driver >= major only", expr: "driver>=550", host: defHost, want: pass},
		{description: "driver >= full equal", expr: "driver>=550.54.15", host: defHost, want: pass},
		{description: "driver > full equal fails", expr: "driver>550.54.15", host: defHost, want: fail},
		{description: "driver < next major", expr: "driver<551", host: defHost, want: pass},
		{description: "driver <= lower fails", expr: "driver<=550.54.14", host: defHost, want: fail},
		{description: "driver = full", expr: "driver=550.54.15", host: defHost, want: pass},
		{description: "driver != full fails", expr: "driver!=550.54.15", host: defHost, want: fail},
		{description: "driver = major only fails", expr: "driver=550", host: defHost, want: fail},
		{description: "host driver leading zero equals expression without", expr: "driver=580.159.4", host: host("13.0", "580.159.04"), want: pass},
		{description: "expression leading zeros", expr: "driver>=580.159.004", host: host("13.0", "580.159.04"), want: pass},
		{description: "leading zero is not a decimal fraction", expr: "driver>580.159.3", host: host("13.0", "580.159.04"), want: pass},
		// arch, per GPU.
		{description: "arch >= lower", expr: "arch>=8.0", host: defHost, want: pass},
		{description: "arch > equal fails", expr: "arch>9.0", host: defHost, want: fail},
		{description: "arch = without minor", expr: "arch=9", host: defHost, want: pass},
		{description: "arch != equal fails", expr: "arch!=9.0", host: defHost, want: fail},
		{description: "arch < equal fails", expr: "arch<9.0", host: defHost, want: fail},
		{description: "arch <= equal", expr: "arch<=9.0", host: defHost, want: pass},
		{description: "arch mismatch on one of two GPUs fails", expr: "arch>=9.0", host: twoArch, want: fail},
		{description: "arch holds on both GPUs", expr: "arch>=8.0", host: twoArch, want: pass},
		{description: "arch = fails when GPUs differ", expr: "arch=8.0", host: twoArch, want: fail},
		{description: "arch with no GPU selected", expr: "arch>=10.0", host: noGPU, want: pass},
		// brand, per GPU, case-insensitive.
		{description: "brand = same", expr: "brand=nvidia", host: defHost, want: pass},
		{description: "brand = upper-case expression", expr: "brand=TESLA", host: host("12.4", "550.54.15", a100), want: pass},
		{description: "brand = mixed-case host", expr: "brand=tesla", host: host("12.4", "550.54.15", GPU{Brand: "Tesla", Arch: "8.0"}), want: pass},
		{description: "brand = other fails", expr: "brand=tesla", host: defHost, want: fail},
		{description: "brand != other", expr: "brand!=geforce", host: defHost, want: pass},
		{description: "brand != same, other case, fails", expr: "brand!=NVIDIA", host: defHost, want: fail},
		{description: "brand mismatch on one of two GPUs fails", expr: "brand=tesla", host: twoBrand, want: fail},
		{description: "brand != on one of two GPUs fails", expr: "brand!=geforce", host: twoBrand, want: fail},
		{description: "brand with no GPU selected", expr: "brand=tesla", host: noGPU, want: pass},
		// OR and AND.
		{description: "second OR-term holds", expr: "cuda>=99 cuda>=12.0", host: defHost, want: pass},
		{description: "one AND-factor fails", expr: "cuda>=12.0,driver>=999", host: defHost, want: fail},
		{description: "AND binds tighter than OR", expr: "cuda>=99 cuda>=12.0,driver>=999", host: defHost, want: fail},
		{description: "every AND-factor holds", expr: "cuda>=12.0,driver>=550,driver<551,arch>=9.0,brand=nvidia", host: defHost, want: pass},
		{description: "real image on a new driver", expr: realCUDA, host: defHost, want: pass},
		{description: "real image, old driver, branch brand matches", expr: realCUDA, host: host("12.2", "470.82.01", a100), want: pass},
		{description: "real image, old driver, branch driver outside", expr: realCUDA, host: host("12.2", "471.1", a100), want: fail},
		{description: "real image, old driver, brand not listed", expr: realCUDA, host: host("12.2", "470.82.01", GPU{Arch: "8.6", Brand: "quadro"}), want: fail},
		{description: "real image, old driver, no GPU selected", expr: realCUDA, host: host("12.2", "470.82.01"), want: pass},
		{description: "later OR-term of three", expr: "cuda>=99 brand=geforce,driver>=535 brand=tesla,driver>=535", host: oldDriver, want: pass},
		// whitespace and empty.
		{description: "runs of spaces and tabs", expr: "  cuda>=99 \t\t cuda>=12.0  ", host: defHost, want: pass},
		{description: "tabs only between failing terms", expr: "cuda>=99\tdriver>=999", host: defHost, want: fail},
		{description: "empty expression", expr: "", host: defHost, want: pass},
		{description: "whitespace-only expression", expr: " \t  ", host: defHost, want: pass},
		// malformed.
		{description: "doubled operator", expr: "cuda>>12", host: defHost, want: malformed},
		{description: "reversed operator", expr: "cuda=>12", host: defHost, want: malformed},
		{description: "double equals", expr: "cuda==12", host: defHost, want: malformed},
		{description: "bang alone", expr: "cuda!12", host: defHost, want: malformed},
		{description: "key only", expr: "cuda", host: defHost, want: malformed},
		{description: "missing value", expr: "cuda>=", host: defHost, want: malformed},
		{description: "missing key", expr: ">=12", host: defHost, want: malformed},
		{description: "empty version component", expr: "cuda>=12..0", host: defHost, want: malformed},
		{description: "trailing dot", expr: "driver>=535.", host: defHost, want: malformed},
		{description: "letters in version", expr: "cuda>=a.b", host: defHost, want: malformed},
		{description: "operator in value", expr: "cuda>=12>3", host: defHost, want: malformed},
		{description: "brand with an ordering operator", expr: "brand>=tesla", host: defHost, want: malformed},
		{description: "brand without value", expr: "brand=", host: defHost, want: malformed},
		{description: "trailing comma", expr: "driver>=1,", host: defHost, want: malformed},
		{description: "leading comma", expr: ",driver>=1", host: defHost, want: malformed},
		{description: "double comma", expr: "cuda>=1,,driver>=1", host: defHost, want: malformed},
		{description: "malformed in a later term", expr: "cuda>=12.0 arch>=x", host: defHost, want: malformed},
		{description: "control character", expr: "foo=\x1b[2J", host: defHost, want: malformed},
		{description: "invalid UTF-8", expr: "foo=\xff", host: defHost, want: malformed},
		// unknown keys: satisfied and reported.
		{description: "unknown key", expr: "foo>=1", host: defHost, want: pass, wantUnknown: []string{"foo"}},
		{description: "unknown key with a failing factor", expr: "foo>=1,cuda>=99", host: defHost, want: fail, wantUnknown: []string{"foo"}},
		{description: "keys are case-sensitive, as NVIDIA", expr: "CUDA>=99", host: defHost, want: pass, wantUnknown: []string{"CUDA"}},
		{description: "unknown key must still be well-formed", expr: "foo>>1", host: defHost, want: malformed},
		{description: "unknown keys in several terms", expr: "cuda>=99,foo=1 bar!=x", host: defHost, want: pass, wantUnknown: []string{"foo", "bar"}},
		// unusable host values.
		{description: "host cuda unknown", expr: "cuda>=12", host: host("", "550.54.15"), want: hostError},
		{description: "host driver malformed", expr: "driver>=535", host: host("12.4", "N/A"), want: hostError},
		{description: "host GPU arch unknown", expr: "arch>=8.0", host: host("12.4", "550.54.15", GPU{ID: "3"}), want: hostError},
		{description: "unused host value is not looked at", expr: "driver>=535", host: host("", "550.54.15"), want: pass},
		{description: "satisfied term ends the evaluation", expr: "driver>=535 cuda>=12", host: host("", "550.54.15"), want: pass},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e, err := parseExpr(tc.expr)
			if tc.want == malformed {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("parseExpr(%q) error = %v, want ErrMalformed", tc.expr, err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(tc.expr)) {
					t.Errorf("parseExpr(%q) error %q does not name the expression", tc.expr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseExpr(%q): %v", tc.expr, err)
			}
			var unknown []string
			for _, f := range e.UnknownKeys() {
				unknown = append(unknown, f.Key)
			}
			if !reflect.DeepEqual(unknown, tc.wantUnknown) {
				t.Errorf("UnknownKeys() keys = %q, want %q", unknown, tc.wantUnknown)
			}
			ok, err := e.Eval(tc.host)
			got := pass
			switch {
			case err != nil:
				got = hostError
				if !errors.Is(err, ErrInvalidVersion) || errors.Is(err, ErrMalformed) {
					t.Errorf("Eval error = %v, want ErrInvalidVersion and not ErrMalformed", err)
				}
			case !ok:
				got = fail
			}
			if got != tc.want {
				t.Errorf("parseExpr(%q).Eval(%+v) = %v (err %v), want %v", tc.expr, tc.host, got, err, tc.want)
			}
		})
	}
}

// parseExpr parses expr as Check does: a malformed one is Check's error, which names it.
func parseExpr(expr string) (Expression, error) {
	e, err := parse(expr)
	if err != nil {
		_, err = Check([]Requirement{{Expression: expr}}, Host{})
	}
	return e, err
}

func TestParse(t *testing.T) {
	got, err := parseExpr(" cuda>=12.4\tbrand=tesla,driver!=535 ")
	if err != nil {
		t.Fatal(err)
	}
	want := Expression{
		Raw: " cuda>=12.4\tbrand=tesla,driver!=535 ",
		Terms: []Term{
			{Raw: "cuda>=12.4", Factors: []Factor{{Raw: "cuda>=12.4", Key: "cuda", Op: OpGreaterEqual, Value: "12.4"}}},
			{Raw: "brand=tesla,driver!=535", Factors: []Factor{
				{Raw: "brand=tesla", Key: "brand", Op: OpEqual, Value: "tesla"},
				{Raw: "driver!=535", Key: "driver", Op: OpNotEqual, Value: "535"},
			}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseExpr() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	testCases := []struct {
		description string
		expr        string
		wantErr     string
	}{
		{description: "doubled operator", expr: "cuda>>12",
			wantErr: `malformed requirement "cuda>>12": factor "cuda>>12": unknown operator ">>" (want one of = != < <= > >=)`},
		{description: "key only", expr: "cuda",
			wantErr: `malformed requirement "cuda": factor "cuda": missing operator (one of = != < <= > >=)`},
		{description: "missing value", expr: "cuda>=",
			wantErr: `malformed requirement "cuda>=": factor "cuda>=": missing value after the operator`},
		{description: "missing key", expr: ">=12",
			wantErr: `malformed requirement ">=12": factor ">=12": missing key before the operator`},
		{description: "empty component", expr: "cuda>=12..0",
			wantErr: `malformed requirement "cuda>=12..0": factor "cuda>=12..0": invalid version "12..0": empty component`},
		{description: "letters", expr: "cuda>=a.b",
			wantErr: `malformed requirement "cuda>=a.b": factor "cuda>=a.b": invalid version "a.b": component "a" is not a number`},
		{description: "brand ordering", expr: "brand>=tesla",
			wantErr: `malformed requirement "brand>=tesla": factor "brand>=tesla": operator ">=" does not apply to brand (want = or !=)`},
		{description: "trailing comma", expr: "cuda>=12 driver>=1,",
			wantErr: `malformed requirement "cuda>=12 driver>=1,": term "driver>=1,": empty factor`},
		{description: "operator in value", expr: "cuda>=12>3",
			wantErr: `malformed requirement "cuda>=12>3": factor "cuda>=12>3": value "12>3" contains an operator character`},
		{description: "control character", expr: "foo=\x1b[2J",
			wantErr: `malformed requirement "foo=\x1b[2J": factor "foo=\x1b[2J": contains a non-printable character`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := parseExpr(tc.expr)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parseExpr(%q) error = %v, want ErrMalformed", tc.expr, err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("parseExpr(%q) error =\n%s\nwant\n%s", tc.expr, err, tc.wantErr)
			}
		})
	}
	// A malformed version in an expression is both malformed and an invalid version.
	if _, err := parseExpr("cuda>=a"); !errors.Is(err, ErrInvalidVersion) {
		t.Errorf("parseExpr(cuda>=a) error = %v, want ErrInvalidVersion too", err)
	}
}

func TestCheckMessages(t *testing.T) {
	const cudaSuffix = ", please update your driver to a newer version, or use an earlier cuda container"
	testCases := []struct {
		description string
		reqs        []Requirement
		host        Host
		wantErr     string
	}{
		{
			description: "cuda>= failure with the suffix and GPU facts (expression has brand terms)",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=12.8 brand=tesla,driver>=470,driver<471"}},
			host:        defHost,
			wantErr:     "unsatisfied condition: cuda>=12.8" + cudaSuffix + " (host: cuda 12.4, driver 550.54.15; GPU 0: arch 9.0, brand nvidia)",
		},
		{
			description: "cuda>= failure, no arch or brand factor: host versions only",
			reqs:        []Requirement{{Name: "CUDA_VERSION", Expression: "cuda>=12.8"}},
			host:        defHost,
			wantErr:     "unsatisfied condition: cuda>=12.8" + cudaSuffix + " (host: cuda 12.4, driver 550.54.15)",
		},
		{
			description: "first OR-term as written when a later term is what fails",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_CUDA", Expression: "\tcuda>=12.8,driver>=560   cuda>=13.0"}},
			host:        defHost,
			wantErr:     "unsatisfied condition: cuda>=12.8,driver>=560" + cudaSuffix + " (host: cuda 12.4, driver 550.54.15)",
		},
		{
			description: "cuda> (not >=) gets no suffix",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>12.4"}},
			host:        defHost,
			wantErr:     "unsatisfied condition: cuda>12.4 (host: cuda 12.4, driver 550.54.15)",
		},
		{
			description: "driver failure",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_DRIVER", Expression: "driver>=560"}},
			host:        defHost,
			wantErr:     "unsatisfied condition: driver>=560 (host: cuda 12.4, driver 550.54.15)",
		},
		{
			description: "driver failure with the cuda version unknown",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_DRIVER", Expression: "driver>=560"}},
			host:        host("", "550.54.15"),
			wantErr:     "unsatisfied condition: driver>=560 (host: cuda unknown, driver 550.54.15)",
		},
		{
			description: "arch failure names each GPU",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_ARCH", Expression: "arch>=9.0"}},
			host:        host("12.4", "550.54.15", GPU{ID: "0", Arch: "8.0", Brand: "tesla"}, GPU{ID: "1", Arch: "9.0", Brand: "tesla"}),
			wantErr:     "unsatisfied condition: arch>=9.0 (host: cuda 12.4, driver 550.54.15; GPU 0: arch 8.0, brand tesla; GPU 1: arch 9.0, brand tesla)",
		},
		{
			description: "GPUs with the same facts share an entry",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_ARCH", Expression: "arch>=10.0"}},
			host: host("12.4", "550.54.15", GPU{ID: "2", Arch: "9.0", Brand: "nvidia"}, GPU{ID: "5", Arch: "8.0", Brand: "tesla"},
				GPU{ID: "3", Arch: "9.0", Brand: "nvidia"}),
			wantErr: "unsatisfied condition: arch>=10.0 (host: cuda 12.4, driver 550.54.15; GPUs 2,3: arch 9.0, brand nvidia; GPU 5: arch 8.0, brand tesla)",
		},
		{
			description: "brand failure",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_BRAND", Expression: "brand=tesla"}},
			host:        host("12.4", "550.54.15", GPU{ID: "1", Arch: "8.6", Brand: "geforce"}),
			wantErr:     "unsatisfied condition: brand=tesla (host: cuda 12.4, driver 550.54.15; GPU 1: arch 8.6, brand geforce)",
		},
		{
			description: "odd host values are quoted and the message stays one line",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_BRAND", Expression: "brand=tesla"}},
			host:        host("12.4", "550.54.15", GPU{ID: "1", Arch: "8.6", Brand: "geforce\nrtx"}),
			wantErr:     `unsatisfied condition: brand=tesla (host: cuda 12.4, driver 550.54.15; GPU 1: arch 8.6, brand "geforce\nrtx")`,
		},
		{
			description: "first failing requirement in the given order",
			reqs: []Requirement{
				{Name: "NVIDIA_REQUIRE_A", Expression: "cuda>=12.0"},
				{Name: "NVIDIA_REQUIRE_B", Expression: "driver>=560"},
				{Name: "NVIDIA_REQUIRE_C", Expression: "cuda>=13.0"},
			},
			host:    defHost,
			wantErr: "unsatisfied condition: driver>=560 (host: cuda 12.4, driver 550.54.15)",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := Check(tc.reqs, tc.host)
			if !errors.Is(err, ErrUnsatisfied) || errors.Is(err, ErrMalformed) {
				t.Fatalf("Check() error = %v, want ErrUnsatisfied only", err)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("Check() error =\n%s\nwant\n%s", err, tc.wantErr)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	testCases := []struct {
		description  string
		reqs         []Requirement
		host         Host
		wantErr      error  // nil: satisfied
		wantText     string // exact error text, when not empty
		wantWarnings []string
	}{
		{description: "no requirements", host: defHost},
		{
			description: "every variable holds",
			reqs: []Requirement{
				{Name: "NVIDIA_REQUIRE_CUDA", Expression: realCUDA},
				{Name: "NVIDIA_REQUIRE_ARCH", Expression: "arch>=8.0"},
				{Name: "NVIDIA_REQUIRE_EMPTY", Expression: "  "},
			},
			host: defHost,
		},
		{
			description: "one failing variable fails all",
			reqs: []Requirement{
				{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=12.0"},
				{Name: "NVIDIA_REQUIRE_ARCH", Expression: "arch>=10.0"},
			},
			host:    defHost,
			wantErr: ErrUnsatisfied,
		},
		{
			description: "malformed names the variable and the expression",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>>12"}},
			host:        defHost,
			wantErr:     ErrMalformed,
			wantText:    `malformed requirement NVIDIA_REQUIRE_CUDA="cuda>>12": factor "cuda>>12": unknown operator ">>" (want one of = != < <= > >=)`,
		},
		{
			description: "malformed brand operator",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_BRAND", Expression: "cuda>=12.0 brand>=tesla"}},
			host:        defHost,
			wantErr:     ErrMalformed,
			wantText:    `malformed requirement NVIDIA_REQUIRE_BRAND="cuda>=12.0 brand>=tesla": factor "brand>=tesla": operator ">=" does not apply to brand (want = or !=)`,
		},
		{
			description: "malformed is reported even after an unsatisfied requirement",
			reqs: []Requirement{
				{Name: "NVIDIA_REQUIRE_A", Expression: "cuda>=99"},
				{Name: "NVIDIA_REQUIRE_B", Expression: "driver>=1,"},
			},
			host:     defHost,
			wantErr:  ErrMalformed,
			wantText: `malformed requirement NVIDIA_REQUIRE_B="driver>=1,": term "driver>=1,": empty factor`,
		},
		{
			description: "unknown key: warning, satisfied",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_FOO", Expression: "foo>=1"}},
			host:        defHost,
			wantWarnings: []string{
				`NVIDIA_REQUIRE_FOO="foo>=1": unknown key "foo" in factor "foo>=1" (known keys: arch, brand, cuda, driver); treated as satisfied`,
			},
		},
		{
			description: "warnings come with an unsatisfied error",
			reqs: []Requirement{
				{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=99,jetpack=5"},
				{Name: "NVIDIA_REQUIRE_X", Expression: "X=1"},
			},
			host:     defHost,
			wantErr:  ErrUnsatisfied,
			wantText: "unsatisfied condition: cuda>=99,jetpack=5, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)",
			wantWarnings: []string{
				`NVIDIA_REQUIRE_CUDA="cuda>=99,jetpack=5": unknown key "jetpack" in factor "jetpack=5" (known keys: arch, brand, cuda, driver); treated as satisfied`,
				`NVIDIA_REQUIRE_X="X=1": unknown key "X" in factor "X=1" (known keys: arch, brand, cuda, driver); treated as satisfied`,
			},
		},
		{
			description: "many unknown factors: one warning for the variable",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_X", Expression: "foo>=1,bar=2 a=1,b=1,c=1,d=1,e=1"}},
			host:        defHost,
			wantWarnings: []string{
				`NVIDIA_REQUIRE_X="foo>=1,bar=2 a=1,b=1,c=1,d=1,e=1": unknown keys "foo", "bar", "a", "b", "c" and 2 more in 7 factors, the first "foo>=1" (known keys: arch, brand, cuda, driver); treated as satisfied`,
			},
		},
		{
			description: "an expression over the length limit is cut in the message",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_X", Expression: strings.Repeat("foo>=1,", 18000)}},
			host:        defHost,
			wantErr:     ErrMalformed,
			wantText:    `malformed requirement NVIDIA_REQUIRE_X=` + strconv.Quote(strings.Repeat("foo>=1,", 18000)[:256]) + `… (126000 bytes): 126000 bytes long, more than the 16384 allowed`,
		},
		{
			description: "too many factors",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_X", Expression: strings.Repeat("a=1,", 1025)[:4*1025-1]}},
			host:        defHost,
			wantErr:     ErrMalformed,
			wantText:    `malformed requirement NVIDIA_REQUIRE_X=` + strconv.Quote(strings.Repeat("a=1,", 64)) + `… (4099 bytes): more than 1024 factors`,
		},
		{
			description: "unusable host value",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=12.0"}},
			host:        host("", "550.54.15"),
			wantErr:     ErrInvalidVersion,
			wantText:    `check NVIDIA_REQUIRE_CUDA="cuda>=12.0": evaluate "cuda>=12.0": host cuda version: invalid version "": empty`,
		},
		{
			description: "a variable name with control characters is quoted",
			reqs:        []Requirement{{Name: "NVIDIA_REQUIRE_\x1b", Expression: "cuda>"}},
			host:        defHost,
			wantErr:     ErrMalformed,
			wantText:    `malformed requirement "NVIDIA_REQUIRE_\x1b"="cuda>": factor "cuda>": missing value after the operator`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			warnings, err := Check(tc.reqs, tc.host)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Check() error = %v, want none", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Check() error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantText != "" && err.Error() != tc.wantText {
				t.Errorf("Check() error =\n%s\nwant\n%s", err, tc.wantText)
			}
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("Check() warnings =\n%q\nwant\n%q", warnings, tc.wantWarnings)
			}
		})
	}
}

// TestEvalHandBuilt covers Expressions built without Parse: an invalid factor is an error,
// never a silent pass.
func TestEvalHandBuilt(t *testing.T) {
	testCases := []struct {
		description string
		factor      Factor
	}{
		{description: "unknown operator", factor: Factor{Raw: "cuda~12", Key: "cuda", Op: "~", Value: "12"}},
		{description: "bad version", factor: Factor{Raw: "cuda>=x", Key: "cuda", Op: OpGreaterEqual, Value: "x"}},
		{description: "brand ordering", factor: Factor{Raw: "brand<x", Key: "brand", Op: OpLess, Value: "x"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := Expression{Terms: []Term{{Raw: tc.factor.Raw, Factors: []Factor{tc.factor}}}}
			ok, err := e.Eval(defHost)
			if ok || !errors.Is(err, ErrMalformed) {
				t.Errorf("Eval() = %v, %v; want false and ErrMalformed", ok, err)
			}
		})
	}
}
