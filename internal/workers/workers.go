package workers

import "sync"

// Default is the number of workers per queue the targets use unless
// configured otherwise. On the 2-core test machine, 4 KiB reads at QD32
// from a loop device reached 27-31k IOPS through one NVMe-oF queue with 4
// workers, 23k with 8 and 17-19k with 32 (each a thread in pread); an SRP
// channel did 90-106k IOPS from a cached file and 20-26k from a loop
// device with 4, 35-41k and 4.5-14k with 32.
const Default = 4

// Pool runs requests of type T on a fixed number of goroutines, started on
// the first Submit. It is safe for concurrent use.
type Pool[T any] struct {
	n    int
	run  func(T)
	hook func(delta int)

	mu      sync.Mutex
	ch      chan T
	closed  bool
	started bool
	wg      sync.WaitGroup
}

// New returns a pool of n goroutines (Default when n <= 0) that call run
// for each submitted request. capacity bounds the requests waiting for a
// worker: give it the most the owner can have in flight, so Submit never
// blocks. hook, if set, is called with +1 when the workers start and -1
// when they end (rdisk sizes GOMAXPROCS with it: workers sit in blocking
// system calls, so their queue wants another P).
func New[T any](n, capacity int, run func(T), hook func(delta int)) *Pool[T] {
	if n <= 0 {
		n = Default
	}
	return &Pool[T]{n: n, run: run, hook: hook, ch: make(chan T, max(capacity, 1))}
}

// Submit queues v for a worker, starting the workers on first use. It
// reports false, and drops v, once the pool is closed.
func (p *Pool[T]) Submit(v T) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if !p.started {
		p.started = true
		if p.hook != nil {
			p.hook(1)
		}
		p.wg.Add(p.n)
		for range p.n {
			go p.worker()
		}
	}
	p.ch <- v
	return true
}

func (p *Pool[T]) worker() {
	defer p.wg.Done()
	for v := range p.ch {
		p.run(v)
	}
}

// Close stops taking requests, lets the workers finish the queued ones and
// waits for them. It is idempotent.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.ch)
	started := p.started
	p.mu.Unlock()
	p.wg.Wait()
	if started && p.hook != nil {
		p.hook(-1)
	}
}
