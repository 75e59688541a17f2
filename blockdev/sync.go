package blockdev

// ReadAt reads len(p) bytes at byte offset off of d into p, blocking until
// done, through a Buffer of its own and in pieces of at most MaxTransfer
// (and 1 MiB). off and len(p) must be multiples of the block size. It
// returns the number of bytes read before the first error. Submissions go to
// queue 0.
func ReadAt(d Device, p []byte, off int64) (int, error) { return syncIO(d, OpRead, p, off) }

// WriteAt writes p at byte offset off of d, like ReadAt.
func WriteAt(d Device, p []byte, off int64) (int, error) { return syncIO(d, OpWrite, p, off) }

// Flush submits an OpFlush to queue 0 and waits for it.
func Flush(d Device) error {
	return Do(d, &Request{Op: OpFlush})
}

// Do submits r and waits for its completion, returning r.Err. It replaces
// r.Done and r.C.
func Do(d Device, r *Request) error {
	ch := make(chan *Request, 1)
	r.Done, r.C, r.Err = nil, ch, nil
	if err := d.Submit(r); err != nil {
		return err
	}
	<-ch
	return r.Err
}

const maxSyncChunk = 1 << 20

func syncIO(d Device, op Op, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	info := d.Info()
	chunk := min(len(p), info.MaxTransfer, maxSyncChunk)
	if bs := info.BlockSize; bs > 0 {
		chunk -= chunk % bs
	}
	if chunk <= 0 {
		return 0, ErrAlignment
	}
	buf, err := d.AllocBuffer(chunk)
	if err != nil {
		return 0, err
	}
	defer buf.Release()
	b := buf.Bytes()
	ch := make(chan *Request, 1)
	r := &Request{Op: op, Buf: buf, C: ch}
	done := 0
	for done < len(p) {
		n := min(chunk, len(p)-done)
		if op == OpWrite {
			copy(b, p[done:done+n])
		}
		r.Offset, r.Length, r.Err = off+int64(done), n, nil
		if err := d.Submit(r); err != nil {
			return done, err
		}
		<-ch
		if r.Err != nil {
			return done, r.Err
		}
		if op == OpRead {
			copy(p[done:done+n], b[:n])
		}
		done += n
	}
	return done, nil
}
