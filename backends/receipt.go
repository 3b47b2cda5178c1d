package backends

import (
	"fmt"
	"strings"
	"time"
)

// Receipt is one receipt kept with a message: a PEC receipt, evidence of
// what became of it, kept as it came for as long as the message is.
type Receipt struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	SavedAt time.Time `json:"saved_at"`
}

// MaxReceiptName bounds a receipt's name, as file systems bound a file's.
const MaxReceiptName = 255

// CheckReceiptName accepts a receipt's name: 1 to 255 letters, digits, '-',
// '_' or '.', not starting with '.'. The spool uses it as a file name, and
// stores as a key.
func CheckReceiptName(name string) error {
	if strings.HasPrefix(name, ".") {
		return fmt.Errorf("receipt name %q must not start with '.'", name)
	}
	return checkToken("receipt name", name, MaxReceiptName, "-_.")
}
