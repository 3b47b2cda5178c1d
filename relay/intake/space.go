package intake

import (
	"errors"
	"syscall"

	"github.com/emersion/go-smtp"
)

// Space says whether the spool's file system can take mail.
type Space interface {
	// Full says why the spool cannot take a message now, or nil.
	Full() error
	// NoSpace tells of a write that failed for want of space.
	NoSpace(err error)
}

// spoolFull refuses a transaction at MAIL while the spool cannot take it,
// as RFC 5321 says (452, insufficient system storage), before the client
// sends a message only to have it refused at the end.
func (s *Server) spoolFull() error {
	if s.cfg.Space == nil {
		return nil
	}
	err := s.cfg.Space.Full()
	if err == nil {
		return nil
	}
	s.metrics.rejected("storage")
	return refusal(452, smtp.EnhancedCode{4, 3, 1}, "Insufficient system storage: the relay's spool is full, try again later")
}

// noSpace tells Space of a write that failed for want of space.
func (s *Server) noSpace(err error) {
	if s.cfg.Space != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		s.cfg.Space.NoSpace(err)
	}
}
