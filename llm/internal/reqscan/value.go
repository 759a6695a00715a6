package reqscan

// valueWords flags.
const (
	valueTag    = 1 // a string in the value may hold a directive tag
	valueBailed = 2 // too deep for valueWords: Value's Go loop takes it
)

// valueAsm selects valueWords, Value's loop in WebAssembly
// (value_wasm.s), under wasm; the tests switch it with maskScanner.
var valueAsm = hasValueWords
