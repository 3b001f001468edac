// The same link options as `outboard-server` (packed relative relocations where this machine's
// glibc can load them): see that file.
include!("../server/app/build.rs");
