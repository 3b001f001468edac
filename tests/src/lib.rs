//! Outboard's test support: the mock LLM server ([`mock_llm`]) shared by the end-to-end suites
//! and the `mock-llm` binary.

pub mod mock_llm;
