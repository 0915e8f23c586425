"""The Apache Cassandra backend."""
