// Command client-go-lease is a fencecheck stdio client (docs/client-protocol.md) over
// Kubernetes' client-go leader election (k8s.io/client-go/tools/leaderelection) with a
// resourcelock.LeaseLock: an acquire of lock L runs a LeaderElector on the Lease named L until
// OnStartedLeading fires; a renew waits for the elector's own next renewal; a release cancels
// the elector, which gives the Lease up (ReleaseOnCancel).
//
// The token is the Lease's resourceVersion returned by the write that made this candidate the
// holder, read from the Lease object the API server returned to the elector's own Create or
// Update (the Lease client is wrapped to see it). Every acquire is a new candidate with its own
// identity.
//
// Evidence (docs/client-protocol.md): every reply about a lock carries the candidate's identity
// and each Get, Create and Update of the Lease its elector made since the last reply, with the
// holder it read or wrote, the resourceVersion it wrote over (base_rv) and the one it read or
// got back (rv), its outcome and when it was sent. The elector's release is the Update with an
// empty holder: fencecheck's checker reads these to say which write let a second candidate in.
//
// Timing, from the client options (FENCECHECK_OPTIONS): lease_duration_ms, renew_deadline_ms,
// retry_period_ms; by default LeaseDuration is lease_ms rounded up to whole seconds (the Lease
// stores whole seconds and candidates trust the stored value), and RenewDeadline and
// RetryPeriod keep client-go's usual 15:10:2 ratio.
//
// Notices: the elector's OnStoppedLeading, when it fires for a term that was granted and not
// released (its renewals failed for RenewDeadline), is sent to the worker as a lost-lock notice
// with the term's token (docs/client-protocol.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"fencecheck/stdio"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

type (
	request = stdio.Request
	reply   = stdio.Reply
)

type options struct {
	Token           string `json:"k8s_token"`
	CAFile          string `json:"k8s_ca_file"`
	Namespace       string `json:"k8s_namespace"`
	LeaseDurationMs int64  `json:"lease_duration_ms"`
	RenewDeadlineMs int64  `json:"renew_deadline_ms"`
	RetryPeriodMs   int64  `json:"retry_period_ms"`
}

// write is one Create or Update of the Lease by an elector, as the API server answered it.
type write struct {
	sent    time.Time
	holder  string
	rv      int64
	err     error
	settled bool // an answer, success or a definite refusal (an API status)
}

// leaseOp is one Get, Create or Update of the Lease by an elector, as evidence.
type leaseOp struct {
	sent   time.Time
	op     string // get, create, update
	holder string // read (get) or written (create, update)
	baseRV string // update: the resourceVersion the write was made over
	rv     string // get: read; create, update: the one the server gave the write
	err    error
}

// campaign is one candidate: its elector, every write it made (newest last), and the Lease
// operations not yet reported.
type campaign struct {
	identity string
	cancel   context.CancelFunc
	started  chan struct{} // closed by OnStartedLeading
	stopped  chan struct{} // closed when Run returned (OnStoppedLeading)
	mu       sync.Mutex
	writes   []write
	log      []leaseOp
	changed  chan struct{} // closed and replaced on every write
	// the grant's token once the acquire replied ok, and whether a release cancelled it: an
	// OnStoppedLeading of a granted, unreleased term is a lost-lock notice
	granted   atomic.Pointer[int64]
	releasing atomic.Bool
}

func (c *campaign) note(o leaseOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, o)
}

// evidence is the candidate's identity and its Lease operations since the last call (after
// those of `before`, a stopped candidate of the same lock whose last ones were never reported),
// each with when it was sent as ns after t0 (when the request being answered was read).
func (c *campaign) evidence(t0 time.Time, before ...*campaign) map[string]any {
	out := []map[string]any{}
	for _, b := range append(before, c) {
		out = append(out, b.entries(t0)...)
	}
	return map[string]any{"identity": c.identity, "lease_ops": out}
}

func (c *campaign) entries(t0 time.Time) []map[string]any {
	c.mu.Lock()
	ops := c.log
	c.log = nil
	c.mu.Unlock()
	out := make([]map[string]any, 0, len(ops))
	for _, o := range ops {
		e := map[string]any{"by": c.identity, "op": o.op, "holder": o.holder,
			"at_ns": o.sent.Sub(t0).Nanoseconds(), "ok": o.err == nil}
		for k, v := range map[string]string{"base_rv": o.baseRV, "rv": o.rv} {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				e[k] = n
			}
		}
		if o.err != nil {
			e["error"] = errorCode(o.err)
		}
		out = append(out, e)
	}
	return out
}

// errorCode is a short word for an error: an API status's reason (Conflict, NotFound), a
// deadline or a cancel, else the message.
func errorCode(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status) && status.Status().Reason != "":
		return string(status.Status().Reason)
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return err.Error()
}

func (c *campaign) record(w write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, w)
	close(c.changed)
	c.changed = make(chan struct{})
}

// won is the first successful write that made this candidate the holder.
func (c *campaign) won() (write, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.writes {
		if w.err == nil && w.holder == c.identity {
			return w, true
		}
	}
	return write{}, false
}

// mayHold says whether a write naming this candidate succeeded or has an unknown outcome.
func (c *campaign) mayHold() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.writes {
		if w.holder == c.identity && (w.err == nil || !w.settled) {
			return true
		}
	}
	return false
}

// leases wraps the typed Lease client so that every Create/Update the elector makes is seen
// with its send time and the Lease the server returned (its resourceVersion is the token).
type leases struct {
	coordclient.LeaseInterface
	c *campaign
}

func (l leases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	sent := time.Now()
	out, err := l.LeaseInterface.Create(ctx, lease, opts)
	l.c.note(written(sent, "create", lease, out, err))
	l.c.record(outcome(sent, lease, out, err))
	return out, err
}

func (l leases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	sent := time.Now()
	base := lease.ResourceVersion // the client sends this object: read it before the call
	out, err := l.LeaseInterface.Update(ctx, lease, opts)
	o := written(sent, "update", lease, out, err)
	o.baseRV = base
	l.c.note(o)
	l.c.record(outcome(sent, lease, out, err))
	return out, err
}

func (l leases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	sent := time.Now()
	out, err := l.LeaseInterface.Get(ctx, name, opts)
	o := leaseOp{sent: sent, op: "get", err: err}
	if err == nil && out != nil {
		o.rv = out.ResourceVersion
		if out.Spec.HolderIdentity != nil {
			o.holder = *out.Spec.HolderIdentity
		}
	}
	l.c.note(o)
	return out, err
}

func written(sent time.Time, op string, in, out *coordinationv1.Lease, err error) leaseOp {
	o := leaseOp{sent: sent, op: op, err: err}
	if in.Spec.HolderIdentity != nil {
		o.holder = *in.Spec.HolderIdentity
	}
	if err == nil && out != nil {
		o.rv = out.ResourceVersion
	}
	return o
}

func outcome(sent time.Time, in, out *coordinationv1.Lease, err error) write {
	w := write{sent: sent, err: err, settled: err == nil}
	if in.Spec.HolderIdentity != nil {
		w.holder = *in.Spec.HolderIdentity
	}
	var status apierrors.APIStatus
	if err != nil && errors.As(err, &status) {
		// The server answered with a status (a conflict, already-exists, forbidden): the write
		// surely did not happen. A timeout or a broken connection leaves it unknown.
		code := status.Status().Code
		w.settled = code >= 400 && code < 500 && code != 408 && code != 429
	}
	if err == nil && out != nil {
		rv, perr := strconv.ParseInt(out.ResourceVersion, 10, 64)
		if perr != nil {
			w.err = fmt.Errorf("resourceVersion %q is not an integer", out.ResourceVersion)
			w.settled = false
		}
		w.rv = rv
	}
	return w
}

type getter struct {
	coordclient.LeasesGetter
	c *campaign
}

func (g getter) Leases(namespace string) coordclient.LeaseInterface {
	return leases{g.LeasesGetter.Leases(namespace), g.c}
}

var (
	client    *kubernetes.Clientset
	opts      options
	opTimeout = time.Second
	held      = map[string]*campaign{}
	worker    = os.Getenv("FENCECHECK_WORKER")
	serial    = 0
)

// timing is the elector's LeaseDuration, RenewDeadline and RetryPeriod for a lease of leaseMs.
func timing(leaseMs int64) (time.Duration, time.Duration, time.Duration) {
	lease := time.Duration((leaseMs+999)/1000) * time.Second
	if opts.LeaseDurationMs > 0 {
		lease = time.Duration(opts.LeaseDurationMs) * time.Millisecond
	}
	renew := lease * 10 / 15
	if opts.RenewDeadlineMs > 0 {
		renew = time.Duration(opts.RenewDeadlineMs) * time.Millisecond
	}
	retry := lease * 2 / 15
	if opts.RetryPeriodMs > 0 {
		retry = time.Duration(opts.RetryPeriodMs) * time.Millisecond
	}
	return lease, renew, retry
}

func acquire(req request, t0 time.Time) reply {
	var before []*campaign
	if c, ok := held[req.Lock]; ok {
		select {
		case <-c.stopped:
			delete(held, req.Lock)
			before = append(before, c)
		default:
			return reply{Status: "fail", Error: "already-held"}
		}
	}
	r := campaignFor(req, t0)
	if r.c != nil {
		r.reply.Evidence = r.c.evidence(t0, before...)
	}
	return r.reply
}

type answered struct {
	c     *campaign
	reply reply
}

// campaignFor runs a new candidate for req.Lock until it leads or the request times out.
func campaignFor(req request, t0 time.Time) answered {
	lease, renew, retry := timing(req.LeaseMs)
	// Candidates judge the holder by the Lease's whole seconds: a shorter stored lease than the
	// one the history counts would let the checker see overlaps that the lock never promised.
	if (lease/time.Second)*1000 < time.Duration(req.LeaseMs) {
		return answered{nil, reply{Status: "fail", Error: "lease-duration-below-lease-ms"}}
	}
	serial++
	c := &campaign{
		identity: fmt.Sprintf("c%s-%d-%d", worker, os.Getpid(), serial),
		started:  make(chan struct{}),
		stopped:  make(chan struct{}),
		changed:  make(chan struct{}),
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: req.Lock, Namespace: opts.Namespace},
		Client:     getter{client.CoordinationV1(), c},
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}
	var once sync.Once
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   lease,
		RenewDeadline:   renew,
		RetryPeriod:     retry,
		ReleaseOnCancel: true,
		Name:            req.Lock,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { once.Do(func() { close(c.started) }) },
			// client-go calls it when Run returns: after a renewal failed for RenewDeadline
			// (and ReleaseOnCancel's release), or after a cancel (our release, or a timed-out
			// acquire, which never led). Only the first is news for the holder.
			OnStoppedLeading: func() {
				if token := c.granted.Load(); token != nil && !c.releasing.Load() {
					stdio.Notice(req.Lock, token, "OnStoppedLeading")
				}
			},
		},
	})
	if err != nil {
		return answered{nil, reply{Status: "fail", Error: "config: " + err.Error()}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.stopped)
		le.Run(ctx)
	}()
	timer := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-c.started:
	case <-c.stopped:
	case <-timer.C:
	}
	select {
	case <-c.started:
		if w, ok := c.won(); ok {
			held[req.Lock] = c
			rv, at := w.rv, w.sent.Sub(t0).Nanoseconds()
			c.granted.Store(&rv)
			if at < 0 {
				at = 0
			}
			return answered{c, reply{Status: "ok", Token: &rv, AttemptNs: &at}}
		}
	default:
	}
	// Not leading in time: stop the candidate. If one of its writes took the Lease (or may
	// have), it may hold it or have just released it: unknown. Otherwise it surely never held.
	cancel()
	select {
	case <-c.stopped:
	case <-time.After(500 * time.Millisecond): // the worker waits timeout_ms + 1 s
		return answered{c, reply{Status: "info", Error: "timeout"}}
	}
	if c.mayHold() {
		return answered{c, reply{Status: "info", Error: "timeout"}}
	}
	return answered{c, reply{Status: "fail", Error: "timeout"}}
}

// renewOp answers ok once the elector has renewed the Lease by a write sent after this request
// was read: the lease counts from the request, so an older renewal would not cover it.
func renewOp(req request, t0 time.Time) reply {
	c, ok := held[req.Lock]
	if !ok {
		return reply{Status: "fail", Error: "not-held"}
	}
	r := renewed(c, req, t0)
	r.Evidence = c.evidence(t0)
	return r
}

func renewed(c *campaign, req request, t0 time.Time) reply {
	deadline := time.After(opTimeout)
	for {
		c.mu.Lock()
		changed := c.changed
		var fresh *write
		for i := len(c.writes) - 1; i >= 0 && !c.writes[i].sent.Before(t0); i-- {
			if w := c.writes[i]; w.err == nil && w.holder == c.identity {
				fresh = &w
			}
		}
		c.mu.Unlock()
		if fresh != nil {
			return reply{Status: "ok"}
		}
		select {
		case <-c.stopped:
			delete(held, req.Lock)
			return reply{Status: "fail", Error: "not-held"}
		case <-changed:
		case <-deadline:
			return reply{Status: "info", Error: "timeout"}
		}
	}
}

// release cancels the elector: client-go then writes the Lease with no holder (ReleaseOnCancel).
func release(req request, t0 time.Time) reply {
	c, ok := held[req.Lock]
	if !ok {
		return reply{Status: "fail", Error: "not-held"}
	}
	delete(held, req.Lock)
	r := released(c, t0)
	r.Evidence = c.evidence(t0)
	return r
}

func released(c *campaign, t0 time.Time) reply {
	select {
	case <-c.stopped:
		return reply{Status: "fail", Error: "not-held"}
	default:
	}
	c.releasing.Store(true)
	c.cancel()
	select {
	case <-c.stopped:
	case <-time.After(opTimeout):
		return reply{Status: "info", Error: "timeout"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.writes) - 1; i >= 0 && !c.writes[i].sent.Before(t0); i-- {
		if w := c.writes[i]; w.holder == "" {
			if w.err == nil {
				return reply{Status: "ok"}
			}
			if !w.settled {
				return reply{Status: "info", Error: "release: " + w.err.Error()}
			}
		}
	}
	// Run returned without a release write: the elector had already lost the Lease.
	return reply{Status: "fail", Error: "not-held"}
}

func connect() error {
	var raw map[string]any
	stdio.Options(&raw)
	stdio.Options(&opts)
	// --client-opt values arrive as strings: accept "2000" as well as 2000.
	for key, dst := range map[string]*int64{"lease_duration_ms": &opts.LeaseDurationMs,
		"renew_deadline_ms": &opts.RenewDeadlineMs, "retry_period_ms": &opts.RetryPeriodMs} {
		if s, ok := raw[key].(string); ok {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("option %s=%q is not an integer", key, s)
			}
			*dst = v
		}
	}
	opTimeout = stdio.OpTimeout()
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	endpoints := stdio.Endpoints()
	n, _ := strconv.Atoi(worker)
	cfg := &rest.Config{
		Host:            "https://" + endpoints[n%len(endpoints)],
		BearerToken:     opts.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: opts.CAFile},
		Timeout:         opTimeout,
		// client-go's default limit (5 requests/s) would delay the elector's own polling.
		QPS:   1000,
		Burst: 1000,
	}
	var err error
	client, err = kubernetes.NewForConfig(cfg)
	return err
}

func main() {
	klog.SetOutput(os.Stderr)
	stdio.Program{Name: "client-go", Connect: connect, Acquire: acquire, Renew: renewOp,
		Release: release, Close: func() {
			for _, c := range held {
				c.releasing.Store(true)
				c.cancel()
				<-c.stopped
			}
		}}.Run()
}
