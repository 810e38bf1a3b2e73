//! The `idgen` command.

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    println!("idgen {}", env!("CARGO_PKG_VERSION"));
}
