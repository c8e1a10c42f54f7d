// Command porcupine checks a history exported by benchmarks/bench_model.py with Porcupine
// (github.com/anishathalye/porcupine), under the same models and time limit as fencecheck's
// `--model` checker, and prints one JSON line: the verdict and the seconds the check took.
//
// The models are fencecheck's (checker/linear/models.py), written for Porcupine:
//   - mutex: a lock that is held or free; acquire needs it free, release and a renew (hold)
//     need it held.
//   - cas-register: read must see the value, write sets it, cas(from, to) needs `from`. A failed
//     cas did not happen (Jepsen and Knossos semantics, as in fencecheck), so it is not exported.
//
// An indeterminate op (fencecheck's optional op: it may or may not have taken effect) has no
// return (math.MaxInt64 here) and a step that may also leave the state as it was; hence the
// nondeterministic model. Ops are partitioned by lock or key, as fencecheck partitions them.
//
// Usage: porcupine -model mutex|cas-register -timeout-s 60 history.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	opAcquire = "acquire"
	opRelease = "release"
	opHold    = "hold"
	opRead    = "read"
	opWrite   = "write"
	opCas     = "cas"
)

// nilValue stands for the register's null (fencecheck's None): no int in a history is this.
const nilValue = math.MinInt64

// exported is one op as bench_model.py writes it; call and ret are event indexes (ret < 0: none).
type exported struct {
	Client   int    `json:"client"`
	Call     int64  `json:"call"`
	Ret      int64  `json:"ret"`
	Kind     string `json:"kind"`
	Part     string `json:"part"`
	A        *int64 `json:"a"`
	B        *int64 `json:"b"`
	Optional bool   `json:"optional"`
}

type input struct {
	kind     string
	part     string
	a, b     int64
	optional bool
}

func value(p *int64) int64 {
	if p == nil {
		return nilValue
	}
	return *p
}

func byPart(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		part := op.Input.(input).part
		i, ok := index[part]
		if !ok {
			i = len(parts)
			index[part] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// step returns the states after the op: its effect where legal, and for an optional op also
// the state as it was (it never happened).
func step(effect func(state int64, in input) (int64, bool)) func(s, i, o interface{}) []interface{} {
	return func(s, i, _ interface{}) []interface{} {
		state, in := s.(int64), i.(input)
		next, legal := effect(state, in)
		switch {
		case legal && in.optional && next != state:
			return []interface{}{next, state}
		case legal:
			return []interface{}{next}
		case in.optional:
			return []interface{}{state}
		default:
			return nil
		}
	}
}

func mutexEffect(held int64, in input) (int64, bool) {
	switch in.kind {
	case opAcquire:
		return 1, held == 0
	case opRelease:
		return 0, held == 1
	default: // hold: a renew that succeeded
		return held, held == 1
	}
}

func casEffect(v int64, in input) (int64, bool) {
	switch in.kind {
	case opRead:
		return v, v == in.a
	case opWrite:
		return in.a, true
	default: // cas
		return in.b, v == in.a
	}
}

// model is deterministic (Porcupine's fast path) unless the history has optional ops.
func model(name string, optional bool) (porcupine.Model, error) {
	var init int64
	var effect func(int64, input) (int64, bool)
	switch name {
	case "mutex":
		init, effect = 0, mutexEffect
	case "cas-register":
		init, effect = nilValue, casEffect
	default:
		return porcupine.Model{}, fmt.Errorf("unknown model %q (mutex, cas-register)", name)
	}
	hash := func(s interface{}) uint64 { return uint64(s.(int64)) }
	if !optional {
		return porcupine.Model{
			Partition: byPart,
			Init:      func() interface{} { return init },
			Step: func(s, i, _ interface{}) (bool, interface{}) {
				next, legal := effect(s.(int64), i.(input))
				return legal, next
			},
			Hash: hash,
		}, nil
	}
	nm := porcupine.NondeterministicModel{
		Partition: byPart,
		Init:      func() []interface{} { return []interface{}{init} },
		Step:      step(effect),
		Hash:      hash,
	}
	return nm.ToModel(), nil
}

func main() {
	name := flag.String("model", "mutex", "mutex or cas-register")
	timeoutS := flag.Float64("timeout-s", 60, "time limit of the check in seconds (0: none)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcupine -model mutex|cas-register -timeout-s 60 history.json")
		os.Exit(3)
	}
	raw, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var ops []exported
	if err := json.Unmarshal(raw, &ops); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag.Arg(0), err)
		os.Exit(3)
	}
	history := make([]porcupine.Operation, 0, len(ops))
	optional := false
	for _, e := range ops {
		optional = optional || e.Optional
		ret := e.Ret
		if ret < 0 {
			ret = math.MaxInt64
		}
		in := input{kind: e.Kind, part: e.Part, a: value(e.A), b: value(e.B), optional: e.Optional}
		history = append(history, porcupine.Operation{ClientId: e.Client, Input: in, Call: e.Call,
			Output: nil, Return: ret})
	}
	m, err := model(*name, optional)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(m, history, time.Duration(*timeoutS*float64(time.Second)))
	elapsed := time.Since(start).Seconds()
	verdict := map[porcupine.CheckResult]string{porcupine.Ok: "valid", porcupine.Illegal: "invalid",
		porcupine.Unknown: "unknown"}[res]
	out, _ := json.Marshal(map[string]interface{}{"verdict": verdict, "seconds": elapsed,
		"ops": len(history), "nondeterministic": optional})
	fmt.Println(string(out))
}
