// Package sdktest holds no code: its tests send requests through the
// official OpenAI and Anthropic SDKs and check that llm/testdata/requests
// still holds what they put on the wire (run them with
// -update-request-fixtures to rewrite it). Package llm's tests run the
// request edits on those files; keeping the SDKs here means package llm's
// tests do not compile them.
package sdktest
