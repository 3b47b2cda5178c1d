package intake

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Accounts are the SMTP AUTH users: name and password.
type Accounts map[string]string

// check compares in constant time, so that timing tells nothing about how
// much of a password was right.
func (a Accounts) check(username, password string) bool {
	want, ok := a[username]
	if !ok {
		want = "\x00no such account"
	}
	w := sha256.Sum256([]byte(want))
	g := sha256.Sum256([]byte(password))
	return subtle.ConstantTimeCompare(w[:], g[:]) == 1 && ok
}

func errAuthFailed() error {
	return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "Authentication failed: wrong user name or password"}
}

// loginServer is the server side of the LOGIN mechanism, which go-sasl only
// offers as a client. Mail clients still use it widely.
type loginServer struct {
	authenticate func(username, password string) error
	step         int
	username     string
}

func (s *loginServer) Next(response []byte) (challenge []byte, done bool, err error) {
	switch s.step {
	case 0:
		s.step = 1
		if response == nil {
			return []byte("Username:"), false, nil
		}
		fallthrough // an initial response carries the user name
	case 1:
		s.username = string(response)
		s.step = 2
		return []byte("Password:"), false, nil
	case 2:
		s.step = 3
		return nil, true, s.authenticate(s.username, string(response))
	}
	return nil, false, errors.New("unexpected LOGIN response after authentication")
}

var _ sasl.Server = (*loginServer)(nil)
