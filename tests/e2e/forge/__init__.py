"""A stand-in for a forge's command line (GitHub's `gh`), for running CI workflows locally."""
