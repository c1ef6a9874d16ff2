use harness::Adapter;

#[derive(Adapter)]
struct Echo;

fn main() {}
