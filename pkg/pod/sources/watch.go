package sources

// watchOp is what a directory watch saw happen to one entry (or to the directory).
type watchOp int

const (
	// opCreated: an entry was created; a regular file may still be being written (its
	// writer's close brings opWritten).
	opCreated watchOp = iota
	// opWritten: an entry's content or mode is final for now (closed after writing,
	// moved into the directory, attributes changed).
	opWritten
	// opRemoved: an entry was deleted or moved out.
	opRemoved
	// opMovedIn: an entry was renamed into place, the last step of an atomic write; it
	// is applied at once, together with whatever was pending.
	opMovedIn
	// opRescan: events may have been lost (queue overflow); list everything again.
	opRescan
)

// watchEvent names a directory entry by its full path.
type watchEvent struct {
	path string
	op   watchOp
}

// dirWatcher delivers changes to the entries of one directory. Events is closed when
// the watch ends: on Close, or when the directory itself is deleted or moved.
type dirWatcher interface {
	Events() <-chan watchEvent
	Close()
}
