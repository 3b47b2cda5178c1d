package submissions

// What the tests of the package's users share with its own.
var (
	AddressCases    = addressCases
	PythonAddresses = pythonAddresses
)
