"""Everything a child process may see: the worker that runs student code, the wire format, the
torch and numpy drivers, the fork server, and the sandbox policy. The sandbox copies this folder whole."""
