// dircleaner's bulk loader for Cassandra: index rows in, sstables out (CQLSSTableWriter), and
// those sstables streamed into a cluster (BulkLoader, what sstableloader runs).
//
// Compiled by dircleaner on first use (javac, against the cassandra-all jar it is run with) into
// a cache directory; never shipped compiled. Python drives it (dircleaner/store/cassandra/
// bulkload.py); the stream it reads is described there and in readFrame below.
//
//   write OUT_DIR BUFFER_MIB TABLES [DIRECTORY CREATE_TABLE INSERT TEXT_COLUMNS]...
//       reads frames from stdin until the end frame; one CQLSSTableWriter per table, each fed
//       by its own thread, writing into OUT_DIR/DIRECTORY; prints "rows TABLE N" per table.
//   load HOSTS NATIVE_PORT STORAGE_PORT KEYSPACE [DIR TABLE]...
//       streams the sstables in each DIR into TABLE, to the replicas of their token ranges
//       (what sstableloader does; credentials, if any, from
//       DIRCLEANER_CASSANDRA_USERNAME / DIRCLEANER_CASSANDRA_PASSWORD, never from arguments).
//
// Any failure: one line on stderr starting with "error: ", exit status 1.

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.File;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;

import io.netty.util.concurrent.FastThreadLocalThread;
import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.io.sstable.CQLSSTableWriter;
import org.apache.cassandra.tools.BulkLoader;
import org.apache.cassandra.tools.LoaderOptions;
import org.apache.cassandra.utils.StorageCompatibilityMode;

public final class DircleanerBulk {
    /** Frames decoded ahead of a table's writer thread (bounds the reader's memory). */
    private static final int FRAMES_AHEAD = 4;
    private static final int END = 0xFF;
    private static final int ONE_BUCKET = 1;
    private static final int ONE_TIMESTAMP = 2;

    private DircleanerBulk() {}

    public static void main(String[] args) {
        try {
            if (args.length >= 1 && args[0].equals("write")) {
                write(args);
            } else if (args.length >= 7 && args.length % 2 == 1 && args[0].equals("load")) {
                load(args);
            } else if (args.length == 1 && args[0].equals("version")) {
                System.out.println("ok");
            } else {
                throw new IllegalArgumentException("usage: write ... | load ... | version");
            }
            System.out.flush();
            System.exit(0);
        } catch (Throwable e) {
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            String message = root.getMessage() == null ? "" : ": " + root.getMessage();
            System.err.println("error: " + root.getClass().getSimpleName() + message.replace('\n', ' '));
            System.err.flush();
            System.exit(1);
        }
    }

    // -- write --------------------------------------------------------------------------------

    /** One frame's rows for one table: the bound values of each row, in INSERT order. */
    private static final class Batch {
        final ByteBuffer[][] rows;

        Batch(ByteBuffer[][] rows) {
            this.rows = rows;
        }
    }

    private static final Batch DONE = new Batch(new ByteBuffer[0][]);

    /** One table: its writer, the frames waiting for it and the thread that drains them. */
    private static final class Table {
        final String name;
        final int textColumns;
        final CQLSSTableWriter writer;
        final BlockingQueue<Batch> queue = new ArrayBlockingQueue<>(FRAMES_AHEAD);
        final Thread thread;
        volatile Throwable failure;
        long rows;

        Table(String name, int textColumns, CQLSSTableWriter writer) {
            this.name = name;
            this.textColumns = textColumns;
            this.writer = writer;
            // A netty FastThreadLocalThread: Cassandra's row builders take a FastThreadLocal per
            // row, which on a plain thread goes through a ThreadLocal (a third of the CPU).
            this.thread = new FastThreadLocalThread(this::drain, "dircleaner-bulk-" + name);
        }

        private void drain() {
            try {
                while (true) {
                    Batch batch = queue.take();
                    if (batch == DONE) {
                        break;
                    }
                    for (ByteBuffer[] row : batch.rows) {
                        writer.rawAddRow(row);
                    }
                    rows += batch.rows.length;
                }
                writer.close();
            } catch (Throwable e) {
                failure = e;
                queue.clear(); // unblock the reader; it sees the failure on its next put
            }
        }

        void put(Batch batch) throws Throwable {
            while (!queue.offer(batch, 100, java.util.concurrent.TimeUnit.MILLISECONDS)) {
                check();
            }
            check();
        }

        void check() throws Throwable {
            if (failure != null) {
                throw failure;
            }
        }
    }

    private static void write(String[] args) throws Throwable {
        File out = new File(args[1]);
        int bufferMiB = Integer.parseInt(args[2]);
        int count = Integer.parseInt(args[3]);
        if (args.length != 4 + 4 * count) {
            throw new IllegalArgumentException("write: expected 4 arguments per table");
        }
        writeCassandra4Format();
        List<Table> tables = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String directory = args[4 + 4 * i];
            File dir = new File(out, directory);
            if (!dir.isDirectory() && !dir.mkdirs()) {
                throw new IllegalStateException("cannot create " + dir);
            }
            CQLSSTableWriter writer = CQLSSTableWriter.builder()
                    .inDirectory(dir.getPath())
                    .forTable(args[5 + 4 * i])
                    .using(args[6 + 4 * i])
                    .withMaxSSTableSizeInMiB(bufferMiB)
                    .build();
            tables.add(new Table(directory, Integer.parseInt(args[7 + 4 * i]), writer));
        }
        for (Table table : tables) {
            table.thread.start();
        }
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in, 1 << 20));
        try {
            while (true) {
                int index = in.readUnsignedByte();
                if (index == END) {
                    break;
                }
                if (index >= tables.size()) {
                    throw new IllegalArgumentException("frame for table " + index + " of " + tables.size());
                }
                Table table = tables.get(index);
                table.put(readFrame(in, table.textColumns));
            }
        } catch (EOFException e) {
            throw new IllegalStateException("the row stream ended without its end frame", e);
        }
        for (Table table : tables) {
            table.put(DONE);
        }
        for (Table table : tables) {
            table.thread.join();
            table.check();
            System.out.println("rows " + table.name + " " + table.rows);
        }
        System.out.println("peak_rss_kib " + peakRssKiB());
    }

    /** This process's peak resident set (VmHWM), or -1 where /proc does not say. */
    private static long peakRssKiB() {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (Exception e) {
            // not Linux: unknown
        }
        return -1;
    }

    /**
     * Write sstables in the 4.x format ("nb"): Cassandra 4.0 and later read it, and so does a
     * 5.0 node in any storage compatibility mode, while one in CASSANDRA_4 mode (5.0's default)
     * does not import the 5.0 format ("oa") that a writer in client mode picks: the client
     * initialisation sets the mode to NONE just before it builds the formats, and the big
     * format fixes its version from the mode when its version class is first loaded. So the
     * mode (a private static) is set here and that class loaded before the initialisation.
     */
    private static void writeCassandra4Format() throws Exception {
        Field mode = DatabaseDescriptor.class.getDeclaredField("storageCompatibilityMode");
        mode.setAccessible(true);
        mode.set(null, StorageCompatibilityMode.CASSANDRA_4);
        Class.forName("org.apache.cassandra.io.sstable.format.big.BigFormat$BigVersion", true,
                DircleanerBulk.class.getClassLoader());
        DatabaseDescriptor.clientInitialization();
    }

    /**
     * One frame: {@code int rows; byte flags;} then each text column as {@code int bytes} and
     * that many bytes of UTF-8 values, each ended by a 0 byte (the first column is the bucket
     * when the table has one: a single value when flags has ONE_BUCKET; a parent of zero bytes
     * repeats the previous row's), then {@code int bytes} of little-endian 64-bit write
     * timestamps in microseconds (a single one when flags has ONE_TIMESTAMP).
     */
    private static Batch readFrame(DataInputStream in, int textColumns) throws Exception {
        int n = in.readInt();
        int flags = in.readUnsignedByte();
        ByteBuffer[][] rows = new ByteBuffer[n][textColumns + 1];
        for (int c = 0; c < textColumns; c++) {
            byte[] block = new byte[in.readInt()];
            in.readFully(block);
            boolean bucketColumn = textColumns == 3 && c == 0;
            boolean parentColumn = c == textColumns - 2;
            boolean single = bucketColumn && (flags & ONE_BUCKET) != 0;
            int start = 0;
            int row = 0;
            ByteBuffer previous = null;
            for (int i = 0; i < block.length; i++) {
                if (block[i] != 0) {
                    continue;
                }
                ByteBuffer value;
                if (parentColumn && i == start && previous != null) {
                    value = previous;
                } else {
                    value = ByteBuffer.wrap(Arrays.copyOfRange(block, start, i));
                }
                previous = value;
                if (single) {
                    for (ByteBuffer[] r : rows) {
                        r[c] = value;
                    }
                } else {
                    if (row >= n) {
                        throw new IllegalArgumentException("frame column " + c + " has more than " + n + " values");
                    }
                    rows[row][c] = value;
                }
                row++;
                start = i + 1;
            }
            int expected = single ? 1 : n;
            if (row != expected || start != block.length) {
                throw new IllegalArgumentException("frame column " + c + " holds " + row + " values, not " + expected);
            }
        }
        byte[] stamps = new byte[in.readInt()];
        in.readFully(stamps);
        ByteBuffer times = ByteBuffer.wrap(stamps).order(ByteOrder.LITTLE_ENDIAN);
        boolean oneTime = (flags & ONE_TIMESTAMP) != 0;
        if (stamps.length != 8 * (oneTime ? 1 : n)) {
            throw new IllegalArgumentException("frame timestamps: " + stamps.length + " bytes for " + n + " rows");
        }
        ByteBuffer shared = oneTime ? bigEndian(times.getLong(0)) : null;
        for (int r = 0; r < n; r++) {
            rows[r][textColumns] = oneTime ? shared : bigEndian(times.getLong(8 * r));
        }
        return new Batch(rows);
    }

    private static ByteBuffer bigEndian(long value) {
        ByteBuffer b = ByteBuffer.allocate(8);
        b.putLong(0, value);
        return b;
    }

    // -- load ---------------------------------------------------------------------------------

    private static void load(String[] args) throws Throwable {
        // One loader per table, all at once: each spends most of its time connecting and
        // closing, not streaming.
        // The loaders share the static configuration: set up once here, before they start (each
        // would otherwise race to initialise it).
        DatabaseDescriptor.clientInitialization();
        List<Thread> threads = new ArrayList<>();
        Throwable[] failure = new Throwable[1];
        for (int i = 5; i < args.length; i += 2) {
            List<String> options = new ArrayList<>(Arrays.asList(
                    "--nodes", args[1],
                    "--port", args[2],
                    "--storage-port", args[3],
                    "--target-keyspace", args[4],
                    "--target-table", args[i + 1],
                    "--no-progress"));
            String user = System.getenv("DIRCLEANER_CASSANDRA_USERNAME");
            String password = System.getenv("DIRCLEANER_CASSANDRA_PASSWORD");
            if (user != null && !user.isEmpty() && password != null) {
                // Handed to the loader inside this process: never on a command line.
                options.addAll(Arrays.asList("--username", user, "--password", password));
            }
            options.add(args[i]);
            LoaderOptions parsed = loaderOptions(options.toArray(new String[0]));
            Thread thread = new Thread(() -> {
                try {
                    BulkLoader.load(parsed);
                } catch (Throwable e) {
                    synchronized (failure) {
                        failure[0] = e;
                    }
                }
            }, "dircleaner-load-" + args[i + 1]);
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        if (failure[0] != null) {
            throw failure[0];
        }
    }

    /** LoaderOptions.builder().parseArgs(args).build(): the builder's class is not public. */
    private static LoaderOptions loaderOptions(String[] args) throws Exception {
        Object builder = LoaderOptions.class.getMethod("builder").invoke(null);
        Method parse = builder.getClass().getMethod("parseArgs", String[].class);
        parse.setAccessible(true);
        Object parsed = parse.invoke(builder, (Object) args);
        Method build = parsed.getClass().getMethod("build");
        build.setAccessible(true);
        return (LoaderOptions) build.invoke(parsed);
    }
}
