import Foundation

/// The platform's notifications for the app returning to the foreground and leaving it, which
/// ``Purchases`` observes (RevenueCat refreshes CustomerInfo on the first, and keeps caches
/// fresh longer after the second). None where the platform has none the SDK can hear (watchOS,
/// Linux): the app calls ``Purchases/applicationWillEnterForeground()`` and
/// ``Purchases/applicationDidEnterBackground()`` itself.
///
/// Named by their raw values (those of `UIApplication.willEnterForegroundNotification` and
/// `.didEnterBackgroundNotification`, `NSApplication.didBecomeActiveNotification` and
/// `.didResignActiveNotification`), so the SDK needs neither UIKit nor AppKit, whose
/// application types are main-actor isolated.
enum AppLifecycle {
    static var notificationNames: (foreground: Notification.Name, background: Notification.Name)? {
        #if os(iOS) || os(tvOS) || os(visionOS)
        (Notification.Name("UIApplicationWillEnterForegroundNotification"), Notification.Name("UIApplicationDidEnterBackgroundNotification"))
        #elseif os(macOS)
        (Notification.Name("NSApplicationDidBecomeActiveNotification"), Notification.Name("NSApplicationDidResignActiveNotification"))
        #else
        nil
        #endif
    }
}
