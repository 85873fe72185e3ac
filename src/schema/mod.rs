//! Single home of every key of the compatibility contract.
