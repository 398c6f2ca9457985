// An HDFS for kdirect's tests: Hadoop's MiniDFSCluster (a NameNode and two DataNodes in this JVM)
// on loopback, the NameNode's RPC on a fixed port, its data under a directory that survives
// restarts (the cluster is formatted only when the directory is new). Run by tests/hdfs/hdfs.sh.
//
//   java -cp 'lib/*:classes' MiniHdfs PORT DATA_DIR
//
// Prints "ready hdfs://127.0.0.1:PORT" once the NameNode is out of safe mode and the DataNodes
// have registered, then runs until killed.
import java.io.File;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public final class MiniHdfs {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: MiniHdfs PORT DATA_DIR");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        File data = new File(args[1]).getAbsoluteFile();
        // Formatted only when new: the NameNode's directories are "name-…" under DATA_DIR.
        String[] names = data.list((dir, n) -> n.startsWith("name"));
        boolean fresh = names == null || names.length == 0;

        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, data.getPath());
        // Loopback only: the NameNode, the DataNodes and their web servers.
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        // Clients reach the DataNodes at the address they registered with (127.0.0.1).
        conf.set("dfs.datanode.hostname", "127.0.0.1");
        // Two DataNodes, each file on both: a commit's pipeline is a real one (and see below).
        conf.setInt("dfs.replication", 2);
        // A test user's files: no permission checks (the client names itself by $USER).
        conf.setBoolean("dfs.permissions.enabled", false);
        // A file may be closed once its last block is committed by the client's pipeline,
        // before the DataNodes' reports of it reach the NameNode (Hadoop's setting for small
        // files' close latency; it needs more than one replica). Without it, the NameNode
        // answers a close "not yet" whenever those reports lag, and the client asks again
        // 500 ms later: on this 2-core machine, about two closes in three (docs/bench.md).
        conf.setInt("dfs.namenode.file.close.num-committed-allowed", 1);

        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
            .nameNodePort(port)
            .numDataNodes(2)
            .format(fresh)
            .manageNameDfsDirs(true)
            .manageDataDfsDirs(true)
            .build();
        cluster.waitActive();
        // A restart over old data: the NameNode leaves safe mode once the blocks are reported.
        while (cluster.getNamesystem().isInSafeMode()) {
            Thread.sleep(200);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
        System.out.println("ready hdfs://127.0.0.1:" + cluster.getNameNodePort());
        System.out.flush();
        Thread.currentThread().join();
    }
}
