package store

import (
	"os"
	"syscall"
)

// checkFile notices the data file removed (or replaced) under the running
// store, by an operator or a cleanup job: the store then starts a new one,
// empty, as the old one's objects are gone with the next restart anyway.
// Readers of the old one finish reading it.
func (d *disk) checkFile() {
	var open, named syscall.Stat_t
	if syscall.Fstat(int(d.f().f.Fd()), &open) != nil {
		return
	}
	if err := syscall.Stat(d.path, &named); err == nil && named.Ino == open.Ino && named.Dev == open.Dev {
		return
	}
	if err := d.reset(); err != nil {
		d.warn("load", err, "dir", d.dir)
		return
	}
	d.log.Error("disk tier data file was removed while the node ran; started a new one (what the old one held is lost)", "file", d.path)
}

// reset swaps in a new, empty data file and empties the index.
func (d *disk) reset() error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(d.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for _, st := range d.stripes {
		st.mu.Lock()
		for st.flushing || st.rotating {
			st.cond.Wait()
		}
	}
	d.poolMu.Lock()
	for _, st := range d.stripes {
		st.imu.Lock()
	}
	old := d.f()
	d.oldFile = append(d.oldFile, old)
	d.file.Store(&dataFile{f: f, fault: old.fault})
	d.gen.Add(1)
	d.fds.renew() // the pool's descriptors are of the old file
	for _, s := range d.segs {
		s.state, s.used, s.run, s.owner = segFree, false, 0, 0
		s.setSeq(0)
	}
	for i := range d.owned {
		d.owned[i] = nil
	}
	d.allUsed.Store(false)
	for _, st := range d.stripes {
		st.tab = table{}
		st.cur, st.buf, st.bufStart, st.failed, st.synced = nil, st.buf[:0], 0, nil, st.lsn
		st.curIdx.Store(-1)
		st.victimCache = victimSet{}
	}
	for _, st := range d.stripes {
		st.imu.Unlock()
	}
	d.poolMu.Unlock()
	for _, st := range d.stripes {
		st.mu.Unlock()
	}
	d.groups.clearDisk()
	d.dirty.Add(1)
	return nil
}
