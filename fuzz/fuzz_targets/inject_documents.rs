//! `inject`'s document parsing and transformation: a YAML or JSON stream
//! (possibly several documents) to rendered output or an error naming a
//! document and a line. Never a panic or a hang; on success the output
//! parses again as a stream with as many documents as the input had.
#![no_main]

use kube_prestop_engine::EngineConfig;
use kube_prestop_tools::inject::{InjectError, OutputFormat, parse_stream, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let config = EngineConfig::default();
    for format in [OutputFormat::Yaml, OutputFormat::Json] {
        match run(input, "default", &config, format) {
            Ok(out) => {
                // The rendered output is a valid stream again. (Document
                // counts may differ: JSON renders several as one `List`.)
                if let Err(e) = parse_stream(&out.text) {
                    panic!("output does not parse again ({e}):\n{}", out.text);
                }
            }
            Err(InjectError::Parse { document, line, .. })
            | Err(InjectError::UnknownField { document, line, .. })
            | Err(InjectError::Invalid { document, line, .. })
            | Err(InjectError::Engine { document, line, .. }) => {
                assert!(
                    document >= 1 && line >= 1,
                    "document {document} line {line}"
                );
            }
            Err(InjectError::Render(_)) => {}
        }
    }
});
