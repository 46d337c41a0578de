//! Parameter list of a V4.1 graph derived from its config by the reference rule (spec §4.2, §4.3). TO BE IMPLEMENTED.
