//! Empty: Cargo resolves a package's build-dependencies (the features they unify) only when it
//! has a build script.

fn main() {}
