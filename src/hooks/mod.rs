//! Test-only switches that the simulator turns and the production code
//! reads at a few points: deliberate mutations (the simulator must catch
//! them) and process pauses. A leaf: it imports no other module, so the
//! code that reads it never imports the simulator.

pub(crate) mod mutation;
pub(crate) mod pause;
