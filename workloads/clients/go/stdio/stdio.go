// Package stdio is the request loop every shipped Go client shares: the JSON-lines protocol of
// docs/client-protocol.md (one request a line on stdin, one reply a line on stdout, in order),
// the environment it starts with (FENCECHECK_ENDPOINTS, FENCECHECK_OPTIONS) and the exit code 3
// for a request it cannot read. A client supplies what acquire, renew and release do with its
// library (Grants keeps what it holds); the loop answers close and unknown ops itself.
//
// Each client's go.mod requires fencecheck/stdio v0.0.0 with `replace fencecheck/stdio =>
// ../stdio` (the build copies this folder beside the client and points the replace there).
package stdio

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// out is stdout, shared by the request loop's replies and the notices of any goroutine: one
// line a write, under its lock, so that a notice never lands inside a reply.
var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func write(v any) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(v)
}

// notice is a lost-lock notice line (docs/client-protocol.md, "Lost-lock notices").
type notice struct {
	Op     string `json:"op"`
	Lock   string `json:"lock"`
	Token  *int64 `json:"token"`
	Reason string `json:"reason"`
}

// Notice tells the worker, now, that the library said the lock it holds (the grant of token,
// nil where it has none) is lost or in doubt; reason is the library's words. Safe from any
// goroutine, at any time, also while a request is in flight.
func Notice(lock string, token *int64, reason string) {
	write(notice{Op: "notice", Lock: lock, Token: token, Reason: reason})
}

// Request is one request line (the token of renew and release is not read: every shipped client
// keeps its own grant per lock).
type Request struct {
	ID        int64  `json:"id"`
	Op        string `json:"op"`
	Lock      string `json:"lock"`
	LeaseMs   int64  `json:"lease_ms"`
	TimeoutMs int64  `json:"timeout_ms"`
}

// Reply is one reply line; the loop sets its ID.
type Reply struct {
	ID        int64  `json:"id"`
	Status    string `json:"status"`
	Token     *int64 `json:"token,omitempty"`
	Error     string `json:"error,omitempty"`
	AttemptNs *int64 `json:"attempt_ns,omitempty"`
	// Evidence is what the library was seen doing (docs/client-protocol.md), in any status.
	Evidence map[string]any `json:"evidence,omitempty"`
}

// untokened is Reply as a lock with no fencing token writes it: "token": null on every line.
type untokened struct {
	ID        int64          `json:"id"`
	Status    string         `json:"status"`
	Token     *int64         `json:"token"`
	Error     string         `json:"error,omitempty"`
	AttemptNs *int64         `json:"attempt_ns,omitempty"`
	Evidence  map[string]any `json:"evidence,omitempty"`
}

// Handler answers one op; start is when its request line was read (attempt_ns counts from it).
type Handler func(req Request, start time.Time) Reply

// Program is one client: its name (in its stderr lines) and what its ops do.
type Program struct {
	Name    string
	Connect func() error // optional: run before the first request; an error exits 3
	Acquire Handler
	Renew   Handler
	Release Handler
	Close   func() // optional: run before the program exits on close
	NoToken bool   // the lock has no fencing token: every reply says "token": null
}

// NotHeld is the reply to a renew or release of a lock the program does not hold: surely not.
var NotHeld = Reply{Status: "fail", Error: "not-held"}

// Grants is what a program holds, one grant a lock.
type Grants[G any] map[string]G

// Renew is the handler that renews a held grant with do; NotHeld when there is none.
func (h Grants[G]) Renew(do func(req Request, g G) Reply) Handler {
	return func(req Request, _ time.Time) Reply {
		g, ok := h[req.Lock]
		if !ok {
			return NotHeld
		}
		return do(req, g)
	}
}

// Release is the handler that gives a held grant up with do, forgotten first: whatever do
// replies, the program no longer holds it. NotHeld when there is none.
func (h Grants[G]) Release(do func(req Request, g G) Reply) Handler {
	return func(req Request, _ time.Time) Reply {
		g, ok := h[req.Lock]
		if !ok {
			return NotHeld
		}
		delete(h, req.Lock)
		return do(req, g)
	}
}

// Options decodes FENCECHECK_OPTIONS into dst as far as it fits (a value of another type is
// skipped), so that a missing or odd option leaves the client's default.
func Options(dst any) {
	_ = json.Unmarshal([]byte(os.Getenv("FENCECHECK_OPTIONS")), dst)
}

// OpTimeout is the client option op_timeout_s, one second when it is not given.
func OpTimeout() time.Duration {
	var opts struct {
		OpTimeoutS float64 `json:"op_timeout_s"`
	}
	Options(&opts)
	if opts.OpTimeoutS > 0 {
		return time.Duration(opts.OpTimeoutS * float64(time.Second))
	}
	return time.Second
}

// Endpoints is FENCECHECK_ENDPOINTS, the lock service's host:port addresses.
func Endpoints() []string {
	return strings.Split(os.Getenv("FENCECHECK_ENDPOINTS"), ",")
}

// Fatal says why the program cannot go on and exits 3.
func (p Program) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{p.Name + ":"}, args...)...)
	os.Exit(3)
}

func (p Program) handle(req Request, start time.Time) Reply {
	switch req.Op {
	case "acquire":
		return p.Acquire(req, start)
	case "renew":
		return p.Renew(req, start)
	case "release":
		return p.Release(req, start)
	case "close":
		if p.Close != nil {
			p.Close()
		}
		os.Exit(0)
	}
	return Reply{Status: "fail", Error: "unknown op " + req.Op}
}

// Run connects and serves: a client's main.
func (p Program) Run() {
	if p.Connect != nil {
		if err := p.Connect(); err != nil {
			p.Fatal(err)
		}
	}
	p.Serve()
}

// Serve answers requests until stdin closes (or close).
func (p Program) Serve() {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		start := time.Now()
		var req Request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			p.Fatal("bad request:", err)
		}
		r := p.handle(req, start)
		r.ID = req.ID
		if p.NoToken {
			write(untokened(r))
		} else {
			write(r)
		}
	}
}
