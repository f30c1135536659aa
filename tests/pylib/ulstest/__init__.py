"""What every Python harness of ulsock shares: the integration suites (tests/integration),
the real-program suites (tests/programs), the benchmark tools (tools/) and bench/'s checks.

  procs  processes in their own session, signalled and ended as a whole process group
  net    TCP ports read from /proc: which listen, which are free, waiting for a listener
  env    the environment a harness hands to what it starts, without ulsock in it
  logs   the lines ulsock logs per connection at level info, as regular expressions

It is a plain directory, not an installed package: each importer puts tests/pylib on
sys.path, relative to its own file, before `import ulstest`. Nothing here imports pytest
(the tools run without it), and nothing opens a socket except net.free_port() without a
span: the harnesses never run under ulsock, and say themselves whether they may.
"""
